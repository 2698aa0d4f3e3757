"""Selection analytics: tool-call feedback, the `analytics` SQL views, reports, the dashboard."""
