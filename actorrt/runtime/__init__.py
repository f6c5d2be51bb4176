"""The launch / run phase: the process Runtime, actor hosts and mailboxes, local clusters."""
