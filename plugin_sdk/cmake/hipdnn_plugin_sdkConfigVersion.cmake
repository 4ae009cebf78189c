# Version check for find_package(hipdnn_plugin_sdk <version> CONFIG).
#
# The package version is the plugin API version the headers describe (HIPDNN_PLUGIN_API_VERSION in
# PluginApiDataTypes.h). A request is satisfied by the same major version at or above the requested
# one: a plugin written for 1.0 builds against 1.1 headers, never against 2.x.

set(PACKAGE_VERSION "")
foreach(_candidate "${CMAKE_CURRENT_LIST_DIR}/../include" "${CMAKE_CURRENT_LIST_DIR}/../../../include")
  set(_header "${_candidate}/hipdnn_plugin_sdk/PluginApiDataTypes.h")
  if(EXISTS "${_header}")
    file(STRINGS "${_header}" _line REGEX "^#define HIPDNN_PLUGIN_API_VERSION \"[0-9]+\\.[0-9]+\\.[0-9]+\"")
    if(_line MATCHES "\"([0-9]+\\.[0-9]+\\.[0-9]+)\"")
      set(PACKAGE_VERSION "${CMAKE_MATCH_1}")
      break()
    endif()
  endif()
endforeach()
unset(_candidate)
unset(_header)
unset(_line)

if(NOT PACKAGE_VERSION)
  set(PACKAGE_VERSION_UNSUITABLE TRUE)
  return()
endif()

set(PACKAGE_VERSION_COMPATIBLE FALSE)
set(PACKAGE_VERSION_EXACT FALSE)
if(NOT PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
else()
  string(REGEX MATCH "^[0-9]+" _major "${PACKAGE_VERSION}")
  if(PACKAGE_FIND_VERSION_MAJOR EQUAL _major AND NOT PACKAGE_VERSION VERSION_LESS PACKAGE_FIND_VERSION)
    set(PACKAGE_VERSION_COMPATIBLE TRUE)
  endif()
  if(PACKAGE_VERSION VERSION_EQUAL PACKAGE_FIND_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
  unset(_major)
endif()
