"""Errors a user can fix. The CLI prints them as one line, with no traceback, and exits non-zero."""


class UserError(Exception):
    """A mistake the user can fix; the CLI prints it as one line, no traceback."""
