"""engine/providers/cublas_lib.py without a GPU: the library is found in the process's memory map
(the file CuPy loaded). The calls themselves run in the GPU tests of the cublas capsules."""
from engine.providers import cublas_lib


def test_the_library_is_the_one_the_process_mapped():
    maps = ("7f00-7f10 r-xp 00000000 08:01 1 /usr/lib/libc.so.6\n"
            "7f20-7f30 r-xp 00000000 08:01 2 /site/nvidia/cu13/lib/libcublasLt.so.13\n"
            "7f40-7f50 r-xp 00000000 08:01 3 /site/nvidia/cu13/lib/libcublas.so.13\n"
            "7f60-7f70 rw-p 00000000 00:00 0\n")
    assert cublas_lib.library_path(maps) == "/site/nvidia/cu13/lib/libcublas.so.13"
    assert cublas_lib.library_path("7f60-7f70 rw-p 00000000 00:00 0\n") is None

