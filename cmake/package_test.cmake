# Builds cmake/consumer against baton as another project would, runs it, and checks the result.
#   cmake -DMODE=install|subproject -DBATON_SOURCE_DIR=... -DBATON_BINARY_DIR=... -DWORK_DIR=...
#         [-DGENERATOR=... -DMAKE_PROGRAM=... -DCXX_COMPILER=... -DCXX_FLAGS=... -DBUILD_TYPE=...
#          -DLAUNCHER=... -DSANITIZE=... -DJOBS=n] -P package_test.cmake
# install:    `cmake --install` into WORK_DIR/prefix, then find_package(baton) from there, and
#             `pkg-config --cflags --libs baton` builds the same program.
# subproject: add_subdirectory(BATON_SOURCE_DIR): only the libraries are built, without -Werror,
#             unoptimized.
# WORK_DIR is emptied first and removed when everything passed.
cmake_minimum_required(VERSION 3.22)

foreach(var MODE BATON_SOURCE_DIR BATON_BINARY_DIR WORK_DIR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "package_test.cmake needs -D${var}=...")
  endif()
endforeach()
if(NOT JOBS)
  set(JOBS 2)
endif()
set(consumer_src ${BATON_SOURCE_DIR}/cmake/consumer)
set(build ${WORK_DIR}/build)

function(run)
  execute_process(COMMAND ${ARGN} COMMAND_ECHO STDOUT RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n(files left in ${WORK_DIR})")
  endif()
endfunction()

# Runs a built consumer and checks that it says so.
function(run_consumer exe)
  execute_process(COMMAND ${exe} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "${exe}: exit ${rc}\n${out}${err}")
  if(NOT rc EQUAL 0 OR NOT out MATCHES "consumer: ok")
    message(FATAL_ERROR "the consumer built against baton failed: exit ${rc}")
  endif()
endfunction()

# Reads NAME's value from the consumer's CMake cache.
function(cache_value name out)
  file(STRINGS ${build}/CMakeCache.txt line REGEX "^${name}:[A-Z]+=")
  if(NOT line)
    message(FATAL_ERROR "${name} is not in the consumer's CMake cache")
  endif()
  string(REGEX REPLACE "^${name}:[A-Z]+=" "" value "${line}")
  set(${out} "${value}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

set(configure ${CMAKE_COMMAND} -S ${consumer_src} -B ${build})
if(GENERATOR)
  list(APPEND configure -G ${GENERATOR})
endif()
if(MAKE_PROGRAM)
  list(APPEND configure -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
if(CXX_COMPILER)
  list(APPEND configure -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
endif()
# A subproject compiles baton's libraries again; what it checks is how baton builds and links
# inside another project, not optimized code, so it builds with no -O and no -g (half the time).
if(MODE STREQUAL "subproject")
  set(BUILD_TYPE "")
endif()
if(BUILD_TYPE)
  list(APPEND configure -DCMAKE_BUILD_TYPE=${BUILD_TYPE})
endif()
if(LAUNCHER)
  list(APPEND configure -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()
# A sanitized baton needs the sanitizer's runtime in whatever links it.
set(extra_flags "")
if(SANITIZE)
  set(extra_flags "-fsanitize=${SANITIZE} -fno-omit-frame-pointer")
  list(APPEND configure "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SANITIZE}")
endif()
string(STRIP "${CXX_FLAGS} ${extra_flags}" all_flags)
if(all_flags)
  list(APPEND configure "-DCMAKE_CXX_FLAGS=${all_flags}")
endif()

if(MODE STREQUAL "install")
  set(prefix ${WORK_DIR}/prefix)
  run(${CMAKE_COMMAND} --install ${BATON_BINARY_DIR} --prefix ${prefix})
  run(${configure} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
  cache_value(baton_DIR baton_dir)
  string(FIND "${baton_dir}" "${prefix}/" at)
  if(NOT at EQUAL 0)
    message(FATAL_ERROR "find_package(baton) found '${baton_dir}', not the package in ${prefix}")
  endif()
  run(${CMAKE_COMMAND} --build ${build} -j ${JOBS})
  run_consumer(${build}/consumer)

  # pkg-config: the same program from the flags baton.pc gives, nothing else.
  find_program(PKG_CONFIG NAMES pkg-config pkgconf REQUIRED)
  file(GLOB_RECURSE pc_files ${prefix}/baton.pc)
  list(LENGTH pc_files n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "expected one installed baton.pc, found: ${pc_files}")
  endif()
  get_filename_component(pc_dir ${pc_files} DIRECTORY)
  set(ENV{PKG_CONFIG_PATH} ${pc_dir})
  execute_process(COMMAND ${PKG_CONFIG} --cflags --libs baton RESULT_VARIABLE rc
                  OUTPUT_VARIABLE flags ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
  message(STATUS "pkg-config --cflags --libs baton: ${flags}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config --cflags --libs baton failed: ${err}")
  endif()
  separate_arguments(flags UNIX_COMMAND "${flags}")
  separate_arguments(extra UNIX_COMMAND "${all_flags}")
  if(NOT CXX_COMPILER)
    set(CXX_COMPILER c++)
  endif()
  run(${LAUNCHER} ${CXX_COMPILER} ${extra} ${consumer_src}/main.cpp -o ${WORK_DIR}/consumer_pc
      ${flags})
  run_consumer(${WORK_DIR}/consumer_pc)
elseif(MODE STREQUAL "subproject")
  run(${configure} -DBATON_SOURCE_DIR=${BATON_SOURCE_DIR} -DBATON_SANITIZE=${SANITIZE})
  # As a subproject baton builds its libraries only, and does not impose -Werror.
  foreach(option BATON_TESTS BATON_BENCH BATON_EXAMPLES BATON_WERROR BATON_HEADER_CHECK
                 BATON_INSTALL)
    cache_value(${option} value)
    if(value)
      message(FATAL_ERROR "${option} is '${value}' in a subproject build; expected OFF")
    endif()
  endforeach()
  run(${CMAKE_COMMAND} --build ${build} -j ${JOBS})
  file(GLOB_RECURSE built_tests ${build}/test_* ${build}/baton-bench ${build}/quickstart)
  if(built_tests)
    message(FATAL_ERROR "a subproject build built baton's tests or programs: ${built_tests}")
  endif()
  # The parent's executables stay where the parent puts them.
  run_consumer(${build}/consumer)
else()
  message(FATAL_ERROR "MODE must be install or subproject, not '${MODE}'")
endif()

file(REMOVE_RECURSE ${WORK_DIR})
