# Shared by every smoke project: the options the generic smoke step passes
# (SMOKE_KIND, SMOKE_FLAVOR, SMOKE_ACCELERATOR), the consumer's language settings,
# and how the program finds the package's libraries at run time.

function(_smoke_one_of name value allowed)
  list(JOIN allowed ", " _choices)
  if(NOT value IN_LIST allowed)
    message(FATAL_ERROR "FAIL: ${name} must be one of ${_choices}, got '${value}'")
  endif()
endfunction()

# smoke_options(DEFAULT_KIND <kind> KINDS <kind>... FLAVORS <flavor>...)
macro(smoke_options)
  cmake_parse_arguments(_smoke "" "DEFAULT_KIND" "KINDS;FLAVORS" ${ARGN})
  set(SMOKE_KIND "${_smoke_DEFAULT_KIND}" CACHE STRING "Package kind: ${_smoke_KINDS}")
  set(SMOKE_FLAVOR "cpu" CACHE STRING "Package flavor: ${_smoke_FLAVORS}")
  set(SMOKE_ACCELERATOR "none" CACHE STRING "Accelerators the flavor means (comma list), or none")
  _smoke_one_of(SMOKE_KIND "${SMOKE_KIND}" "${_smoke_KINDS}")
  _smoke_one_of(SMOKE_FLAVOR "${SMOKE_FLAVOR}" "${_smoke_FLAVORS}")
  set(CMAKE_CXX_STANDARD 17)
  set(CMAKE_CXX_STANDARD_REQUIRED ON)
  set(CMAKE_CXX_EXTENSIONS OFF)
  # /MD or /MDd, as every package is built (static deps defaulting to /MT gave LNK2005).
  set(CMAKE_MSVC_RUNTIME_LIBRARY "MultiThreaded$<$<CONFIG:Debug>:Debug>DLL")
endmacro()

# The debug CRT a Windows Debug program needs, which is neither redistributable nor on a
# clean PATH: Visual Studio's debug_nonredist DLLs (vcruntime140d, msvcp140d, ...) and the
# Windows SDK's ucrtbased.dll, for the compiler's target architecture (as upstream's smoke
# harness copied them). Read from the MSVC developer environment.
function(_smoke_debug_crt out)
  string(TOLOWER "${CMAKE_CXX_COMPILER_ARCHITECTURE_ID}" _arch)  # x64 | arm64
  file(TO_CMAKE_PATH "$ENV{VCToolsRedistDir}" _redist)
  file(TO_CMAKE_PATH "$ENV{WindowsSdkDir}" _sdk)
  file(TO_CMAKE_PATH "$ENV{WindowsSDKVersion}" _sdk_version)
  string(REGEX REPLACE "/+$" "" _sdk_version "${_sdk_version}")
  if(NOT _arch OR NOT _redist OR NOT _sdk)
    message(FATAL_ERROR "FAIL: a Windows Debug smoke needs the debug CRT of the MSVC developer environment "
      "(architecture '${_arch}', VCToolsRedistDir '${_redist}', WindowsSdkDir '${_sdk}')")
  endif()
  file(GLOB _crt "${_redist}/debug_nonredist/${_arch}/Microsoft.VC*.DebugCRT/*.dll")
  file(GLOB _ucrt "${_sdk}/bin/${_sdk_version}/${_arch}/ucrt/ucrtbased.dll")
  if(NOT _ucrt)  # WindowsSDKVersion unset or another layout: any installed SDK's
    file(GLOB _ucrt "${_sdk}/bin/*/${_arch}/ucrt/ucrtbased.dll")
  endif()
  if(NOT _crt OR NOT _ucrt)
    message(FATAL_ERROR "FAIL: debug CRT not found for ${_arch}: "
      "${_redist}/debug_nonredist/${_arch}/Microsoft.VC*.DebugCRT/*.dll -> '${_crt}'; "
      "${_sdk}/bin/<version>/${_arch}/ucrt/ucrtbased.dll -> '${_ucrt}'")
  endif()
  list(GET _ucrt -1 _ucrt)  # the newest SDK when several match
  set(${out} ${_crt} ${_ucrt} PARENT_SCOPE)
endfunction()

# smoke_runtime(<target> <package lib dir> [<dll>...]): an rpath to the package on
# ELF/Mach-O; on Windows the package's DLLs next to the executable (errors not swallowed),
# and for Debug builds the debug CRT too.
function(smoke_runtime target libdir)
  if(APPLE OR UNIX)
    set_target_properties(${target} PROPERTIES BUILD_WITH_INSTALL_RPATH ON INSTALL_RPATH "${libdir}")
  endif()
  set(_dlls ${ARGN})
  if(MSVC AND CMAKE_BUILD_TYPE STREQUAL "Debug")
    _smoke_debug_crt(_crt)
    message(STATUS "smoke: debug CRT next to ${target}.exe: ${_crt}")
    list(APPEND _dlls ${_crt})
  endif()
  if(WIN32 AND _dlls)
    add_custom_command(TARGET ${target} POST_BUILD
      COMMAND "${CMAKE_COMMAND}" -E copy_if_different ${_dlls} "$<TARGET_FILE_DIR:${target}>"
      COMMENT "Copying the package's DLLs (and a Debug build's CRT) next to ${target}.exe"
      VERBATIM)
  endif()
endfunction()
