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

# smoke_runtime(<target> <package lib dir> [<dll>...]): an rpath to the package on
# ELF/Mach-O; on Windows the package's DLLs next to the executable (errors not swallowed).
function(smoke_runtime target libdir)
  if(APPLE OR UNIX)
    set_target_properties(${target} PROPERTIES BUILD_WITH_INSTALL_RPATH ON INSTALL_RPATH "${libdir}")
  endif()
  if(WIN32 AND ARGN)
    add_custom_command(TARGET ${target} POST_BUILD
      COMMAND "${CMAKE_COMMAND}" -E copy_if_different ${ARGN} "$<TARGET_FILE_DIR:${target}>"
      COMMENT "Copying the package's DLLs next to ${target}.exe"
      VERBATIM)
  endif()
endfunction()
