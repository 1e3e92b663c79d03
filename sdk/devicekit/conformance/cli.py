"""``devicekit conformance`` (being built: issue 4)."""


def add_parser(sub):
    pass  # registers nothing until the runner exists
