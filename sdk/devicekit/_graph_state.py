"""Which devices are capturing a graph right now (a leaf: devicekit.graphs
writes it, the host-reading Tensor methods read it to name themselves in the
error; the C++ core refuses the same host work again, unnamed, below them)."""

from .errors import InvalidArgumentError

#: Names of the devices with an open capture ("cpu:0"). Empty almost always,
#: so the check a host read pays is one truth test.
capturing: set = set()


def refuse_host(call, device_name):
    raise InvalidArgumentError(
        f"devicekit.graphs.capture: {call} needs the host (it copies device memory to the "
        f"host), but device {device_name} is capturing a graph, which records device work "
        f"only. Hint: read the result after the capture, or after Graph.replay().")
