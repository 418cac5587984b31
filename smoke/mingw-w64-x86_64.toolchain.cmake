# Cross-builds a smoke consumer for Windows x86_64 with MinGW-w64 (Debian's
# g++-mingw-w64-x86-64-posix) and runs it under wine through ctest's emulator hook.
# Only for packages consumed through a C ABI: MinGW's C++ ABI is not MSVC's.
#
#   cmake -S smoke/<engine> -B <build> -DCMAKE_TOOLCHAIN_FILE=smoke/mingw-w64-x86_64.toolchain.cmake ...
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR AMD64)
set(CMAKE_C_COMPILER x86_64-w64-mingw32-gcc)
set(CMAKE_CXX_COMPILER x86_64-w64-mingw32-g++)
set(CMAKE_RC_COMPILER x86_64-w64-mingw32-windres)
# The MinGW runtime (libstdc++, libgcc, winpthread) linked in: the executable then needs
# only the package's DLLs, which the smoke project copies next to it, and Windows' own.
set(CMAKE_EXE_LINKER_FLAGS_INIT -static)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_CROSSCOMPILING_EMULATOR wine)
