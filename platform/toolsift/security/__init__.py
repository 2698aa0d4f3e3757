"""Rate limits and the audit log of admin changes."""
