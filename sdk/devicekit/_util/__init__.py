"""Small utilities the commands share: ``output`` (every output file whole or
not at all; signals; exit codes), ``workers`` (the suites' worker processes),
``text`` (plain-text tables), ``bounded`` (reading untrusted files with a size
cap). Leaves: nothing here imports the framework or the harnesses.
"""
