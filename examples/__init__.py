"""Runnable examples built on actorrt (``python -m examples.<name>``)."""
