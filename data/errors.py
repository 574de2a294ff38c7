"""The one error type a user can fix: a bad setting, file or input, reported as one line."""


class UserError(Exception):
    """A problem the user can fix; entry points print it as one `error: ...` line, exit 1.

    Raise it (or a subclass) at the boundary where the bad input is first seen, with a message
    that names the key or file and says what to do. Anything else is a bug and keeps its
    traceback.
    """
