"""DeviceKit in one screen: discover plugins, move data to a device, run ops,
read the device's own memory statistics. Runs on the reference CPU plugin that
`pip install .` builds and registers like any vendor plugin."""

import numpy as np

import devicekit as dk

print(f"devicekit {dk.__version__}, device API {dk.API_VERSION}")
for rec in dk.plugins():
    status = "loaded" if rec.loaded else f"FAILED: {rec.error}"
    print(f"plugin {rec.name:8s} {status}  ({rec.source}: {rec.path})")
for dev in dk.devices():
    p = dev.properties
    print(f"device {dev.name}: {p['name']}, {p['total_memory'] / 2**30:.1f} GiB, "
          f"dtypes {', '.join(p['dtypes'])}")

dev = dk.device("cpu:0")
x = dk.tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=dev)
y = dk.tensor([10.0, 20.0, 30.0, 40.0], device=dev)       # broadcast over rows
z = dk.ops.add(x.T.contiguous().T, y)                       # strided view, materialised by the SDK
h = (z + 0.5).to(dk.bfloat16)                              # scalar add, then cast
print("x + y =\n", z.numpy())
print("as bfloat16:", h.dtype, h.numpy()[0])
assert np.array_equal(z.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4) + [10, 20, 30, 40])

del x, y, z, h
dk.synchronize()
stats = dev.memory_stats()
print(f"SDK cache: allocated {stats['allocated_bytes']} B, cached {stats['cached_bytes']} B; "
      f"plugin: {stats['bytes_in_use']} B in use, peak {stats['peak_bytes_in_use']} B")
dk.empty_cache()
print(f"after empty_cache: plugin bytes in use = {dev.memory_stats()['bytes_in_use']}")
print("OK")
