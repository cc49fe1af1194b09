"""Errors tlsearch reports to people: the command line prints their message as one line."""


class TLSearchError(Exception):
    """Base of every error caused by input or state the user can fix; its message says what and how."""
