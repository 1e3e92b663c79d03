"""``devicekit new`` (being built: issue 5)."""


def add_parser(sub):
    pass  # registers nothing until the templates exist
