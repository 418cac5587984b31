# Cross-builds a smoke consumer for Linux aarch64 on an x86_64 host (Debian's
# g++-aarch64-linux-gnu) and runs it under qemu-user through ctest's emulator hook.
#
#   cmake -S smoke/<engine> -B <build> -DCMAKE_TOOLCHAIN_FILE=smoke/aarch64-linux-gnu.toolchain.cmake ...
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# The package under test lives outside any sysroot.
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
