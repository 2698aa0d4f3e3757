"""Celery workers: `celery -A workers worker` or `toolsift worker`. Tasks are thin; logic lives in toolsift."""

from .celery_app import celery_app as celery

__all__ = ["celery"]
