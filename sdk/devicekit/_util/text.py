"""Plain-text tables for the command line: the one format every CLI table
(devices, bench, gate check, gate matrix) is printed in. Its own module so
that the tools below the CLI can print tables without importing the CLI."""


def table(rows, headers):
    """Columns padded to their widest cell, a rule under the headers."""
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]

    def line(r):
        return "  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip()
    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])
