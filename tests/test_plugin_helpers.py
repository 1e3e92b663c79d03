"""device_api/include/devicekit/plugin_helpers.h: compiled and run.

A small C program calls each helper and prints what it got; the test checks
the messages (they are what a vendor's users read), the view and dtype
helpers, and that the header compiles cleanly as C99, C11 and C++17 without
touching device_api.h's ABI (it only includes it).

Needs a C compiler (skipped with the reason otherwise); the C++ check also
needs c++/g++/clang++.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import DEVICE_API_INCLUDE, _find_c_compiler

PROGRAM = r"""
#include <devicekit/plugin_helpers.h>

static void show(DK_Error* e) {
  if (e == NULL) { printf("ok\n"); return; }
  DK_Error_Message_Args m = {DK_Error_Message_Args_STRUCT_SIZE, e, NULL, 0};
  DK_Error_GetCode_Args c = {DK_Error_GetCode_Args_STRUCT_SIZE, e, 0};
  dkh_Error_Message(&m);
  dkh_Error_GetCode(&c);
  printf("%d|%.*s\n", (int)c.code, (int)m.message_size, m.message);
  DK_Error_Destroy_Args d = {DK_Error_Destroy_Args_STRUCT_SIZE, e};
  dkh_Error_Destroy(&d);
}

static DK_Error* small_struct(void) {
  DK_Device_Count_Args a = {DK_Device_Count_Args_STRUCT_SIZE - 1, 0};
  DKH_CHECK_STRUCT("acme.Device_Count", &a, DK_Device_Count_Args);
  return NULL;
}

int main(void) {
  show(dkh_error(DK_ERROR_INTERNAL, "acme.X: %d of %s", 3, "four"));
  show(small_struct());
  show(dkh_check_struct("acme.Y", NULL, 0, 8, "DK_Y_Args"));
  show(dkh_check_device("acme.Z", "acme", 2, 2));
  show(dkh_check_device("acme.Z", "acme", 1, 2));

  int64_t shape[2] = {2, 3}, dense[2] = {3, 1}, trans[2] = {1, 2}, bcast[2] = {0, 1};
  DK_TensorView v = {DK_TensorView_STRUCT_SIZE, NULL, DK_DTYPE_FLOAT32, 2, shape, dense};
  DK_TensorView t = {DK_TensorView_STRUCT_SIZE, NULL, DK_DTYPE_FLOAT32, 2, shape, trans};
  DK_TensorView b = {DK_TensorView_STRUCT_SIZE, NULL, DK_DTYPE_FLOAT16, 2, shape, bcast};
  printf("numel %lld dense %d %d %d same %d\n", (long long)dkh_numel(&v), dkh_is_dense(&v),
         dkh_is_dense(&t), dkh_is_dense(&b), dkh_same_shape(&v, &t));
  show(dkh_check_view("acme.add", "input 1", &t, DK_DTYPE_BIT(DK_DTYPE_FLOAT32), 0));
  show(dkh_check_view("acme.add", "input 1", &t, DK_DTYPE_BIT(DK_DTYPE_FLOAT32),
                      DK_KERNEL_CAP_STRIDED));
  show(dkh_check_view("acme.add", "out", &b, DK_DTYPE_BIT(DK_DTYPE_FLOAT32),
                      DK_KERNEL_CAP_STRIDED));
  show(dkh_check_view("acme.add", "out", NULL, 1, 0));

  int64_t empty[2] = {0, 3}, odd[2] = {7, 5}, ones[2] = {1, 3}, any[2] = {9, 1};
  printf("contiguous %d %d %d %d %d %d\n", dkh_is_contiguous(2, shape, dense),
         dkh_is_contiguous(2, shape, trans), dkh_is_contiguous(2, empty, odd),
         dkh_is_contiguous(2, shape, odd), dkh_is_contiguous(2, ones, any),
         dkh_is_contiguous(0, NULL, NULL));

  int64_t idx[DK_MAX_RANK] = {0};
  printf("walk");
  do printf(" %lld", (long long)dkh_offset(&t, idx)); while (dkh_next_index(idx, shape, 2));
  printf("\n");

  const DK_Kernel_Args* none[1] = {0};
  DK_Kernel_Args k = {DK_Kernel_Args_STRUCT_SIZE, 0, NULL, DK_OP_ADD, 1, NULL, 1, NULL, NULL};
  (void)none;
  show(dkh_check_kernel_call("acme.add", &k, DK_OP_ADD, 2, 1));
  show(dkh_check_kernel_call("acme.add", &k, DK_OP_NEG, 1, 1));

  for (int d = 0; d <= DK_DTYPE_COUNT_1_0; ++d)
    printf("%s=%zu ", dkh_dtype_name(d), dkh_dtype_size(d));
  printf("\n");
  return 0;
}
"""

EXPECTED = [
    "4|acme.X: 3 of four",
    "1|acme.Device_Count: DK_Device_Count_Args.struct_size is {n}, expected at least {m}. "
    "Hint: set it with DK_Device_Count_Args_STRUCT_SIZE.",
    "1|acme.Y: args is NULL; expected a DK_Y_Args*",
    "6|acme.Z: device ordinal 2 is out of range; this plugin has 2 device(s), acme:0..acme:1",
    "ok",
    "numel 6 dense 1 0 0 same 1",
    "1|acme.add: input 1 is not dense row-major; this kernel declared no "
    "DK_KERNEL_CAP_STRIDED, so the SDK must materialise it first",
    "ok",
    "1|acme.add: out has dtype float16 (1); this kernel declared the dtype mask 0x1. "
    "Hint: the SDK only sends declared dtypes, so this is an SDK bug or a stale kernel table.",
    "1|acme.add: out is NULL or its struct_size is 0; expected at least {view}",
    "contiguous 1 0 1 0 1 1",
    "walk 0 2 4 1 3 5",
    "1|acme.add: got 1 input(s) and 1 output(s); expected 2 and 1",
    "1|acme.add: args->op is 3; expected 4. Hint: the kernel table is indexed by DK_OpId.",
    "float32=4 float16=2 bfloat16=2 float64=8 int8=1 int32=4 int64=8 uint8=1 bool=1 "
    "unknown=0",
]


@pytest.fixture(scope="module")
def compiler():
    cc = _find_c_compiler()
    if cc is None:
        pytest.skip("no C compiler on PATH: cannot compile plugin_helpers.h")
    return cc


def _sizes(cc, tmp_path) -> dict:
    probe = tmp_path / "sizes.c"
    probe.write_text("#include <stdio.h>\n#include <devicekit/device_api.h>\nint main(void) {"
                     "printf(\"%zu %zu\", (size_t)DK_Device_Count_Args_STRUCT_SIZE, "
                     "(size_t)DK_TensorView_STRUCT_SIZE); return 0; }\n")
    exe = tmp_path / "sizes"
    subprocess.run([cc, f"-I{DEVICE_API_INCLUDE}", "-o", str(exe), str(probe)], check=True)
    n, view = map(int, subprocess.run([str(exe)], capture_output=True, text=True,
                                      check=True).stdout.split())
    return {"n": n - 1, "m": n, "view": view}


@pytest.mark.parametrize("std", ["c99", "c11"])
def test_helpers_messages_views_and_dtypes(compiler, tmp_path, std):
    source = tmp_path / "helpers.c"
    source.write_text(PROGRAM)
    exe = tmp_path / "helpers"
    cmd = [compiler, f"-std={std}", "-Wall", "-Wextra", "-Werror", "-pedantic",
           f"-I{DEVICE_API_INCLUDE}", "-o", str(exe), str(source)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    sizes = _sizes(compiler, tmp_path)
    assert out.strip().splitlines() == [line.format(**sizes) for line in EXPECTED]


def test_helpers_compile_as_cpp(tmp_path):
    cxx = next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), None)
    if cxx is None:
        pytest.skip("no C++ compiler on PATH")
    source = tmp_path / "helpers.cpp"
    source.write_text("#include <devicekit/plugin_helpers.h>\nint main() { "
                      "return dkh_dtype_size(DK_DTYPE_FLOAT32) == 4 ? 0 : 1; }\n")
    result = subprocess.run([cxx, "-std=c++17", "-Wall", "-Wextra", "-Werror",
                             f"-I{DEVICE_API_INCLUDE}", "-fsyntax-only", str(source)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_device_api_header_does_not_include_the_helpers():
    text = (DEVICE_API_INCLUDE / "devicekit" / "device_api.h").read_text()
    assert "plugin_helpers" not in text
