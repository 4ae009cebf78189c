# Fills in what CMake's HIP language needs when HIP's clang lives outside ROCm's usual layout.
# CMake finds a ROCm install by itself (/opt/rocm/llvm/bin/clang++, hip-lang under lib/cmake);
# Debian's hipcc package instead ships clang++-15 in /usr/bin, the device libraries and CMake
# packages under lib/<multiarch>. hipcc knows its layout: HIPCC_VERBOSE=3 prints its paths and
# the clang command it would run, which is what is read here.
#
# hipdnn_find_hip_clang() sets, when hipcc is found and CMAKE_HIP_COMPILER is not set already:
# CMAKE_HIP_COMPILER (cache), CMAKE_HIP_FLAGS_INIT (--rocm-path, and the device library path
# when it is not the default), and CMAKE_PREFIX_PATH so hip-lang's dependencies are found,
# also inside CMake's compiler checks.
function(hipdnn_find_hip_clang)
  if(CMAKE_HIP_COMPILER)
    hipdnn_hip_package_path("${HIPDNN_HIP_ROCM_PATH}")
    return()
  endif()
  find_program(HIPDNN_HIPCC hipcc HINTS "$ENV{ROCM_PATH}/bin" /opt/rocm/bin)
  if(NOT HIPDNN_HIPCC)
    return()
  endif()
  # An explicit target keeps hipcc from querying the machine's GPUs (there may be none).
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -E env HIPCC_VERBOSE=3 HIP_PLATFORM=amd "${HIPDNN_HIPCC}" --offload-arch=gfx90a --version
    OUTPUT_VARIABLE _out ERROR_QUIET RESULT_VARIABLE _rc)
  string(REGEX MATCH "hipcc-cmd: *([^ \n]+)" _m "${_out}")
  set(_clang "${CMAKE_MATCH_1}")
  string(REGEX MATCH "ROCM_PATH=([^\n]*)" _m "${_out}")
  set(_rocm "${CMAKE_MATCH_1}")
  string(REGEX MATCH "DEVICE_LIB_PATH=([^\n]*)" _m "${_out}")
  set(_devlib "${CMAKE_MATCH_1}")
  if(NOT _rc EQUAL 0 OR NOT _clang OR NOT EXISTS "${_clang}" OR NOT IS_DIRECTORY "${_rocm}")
    message(STATUS "hipdnn_hip_engine: ${HIPDNN_HIPCC} did not name its clang and ROCm path; "
                   "pass -DCMAKE_HIP_COMPILER=<HIP's clang++>")
    return()
  endif()
  set(CMAKE_HIP_COMPILER "${_clang}" CACHE FILEPATH "HIP's clang, as hipcc runs it")
  set(_flags "--rocm-path=${_rocm}")
  if(_devlib AND NOT _devlib STREQUAL "${_rocm}/amdgcn/bitcode")
    string(APPEND _flags " --rocm-device-lib-path=${_devlib}")
  endif()
  set(CMAKE_HIP_FLAGS_INIT "${CMAKE_HIP_FLAGS_INIT} ${_flags}" PARENT_SCOPE)
  set(HIPDNN_HIP_ROCM_PATH "${_rocm}" CACHE INTERNAL "ROCm path hipcc reported")
  hipdnn_hip_package_path("${_rocm}")
  message(STATUS "hipdnn_hip_engine: HIP's clang from hipcc: ${_clang} (${_flags})")
endfunction()

# hip-lang's CMake package under lib/<multiarch> finds its dependencies there only when the
# project knows the multiarch directory, which CMake's HIP compiler checks do not: name it.
macro(hipdnn_hip_package_path rocm)
  set(_pkgdir "${rocm}/lib/${CMAKE_LIBRARY_ARCHITECTURE}/cmake")
  if(NOT "${rocm}" STREQUAL "" AND CMAKE_LIBRARY_ARCHITECTURE AND EXISTS "${_pkgdir}/hip-lang/hip-lang-config.cmake")
    set(CMAKE_PREFIX_PATH ${CMAKE_PREFIX_PATH} "${_pkgdir}" PARENT_SCOPE)
    set(CMAKE_TRY_COMPILE_PLATFORM_VARIABLES ${CMAKE_TRY_COMPILE_PLATFORM_VARIABLES} CMAKE_PREFIX_PATH PARENT_SCOPE)
  endif()
endmacro()
