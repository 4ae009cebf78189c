# The release version, written once in pyproject.toml ([project] version): scikit-build-core passes
# it as SKBUILD_PROJECT_VERSION; any other build (plain CMake, the fuzz harness) reads the file.
# Every target compiled after this sees it as the HIPDNN_VERSION string, which plugins report
# through hipdnnPluginGetVersion.
if(DEFINED SKBUILD_PROJECT_VERSION)
  set(HIPDNN_VERSION "${SKBUILD_PROJECT_VERSION}")
else()
  file(STRINGS "${CMAKE_CURRENT_LIST_DIR}/../pyproject.toml" _hipdnn_version_line REGEX "^version = \"[^\"]+\"$")
  string(REGEX REPLACE "^version = \"([^\"]+)\"$" "\\1" HIPDNN_VERSION "${_hipdnn_version_line}")
  unset(_hipdnn_version_line)
endif()
if(NOT HIPDNN_VERSION MATCHES "^[0-9]+\\.[0-9]+\\.[0-9]+")
  message(FATAL_ERROR "no release version found (pyproject.toml [project] version): '${HIPDNN_VERSION}'")
endif()
add_compile_definitions("HIPDNN_VERSION=\"${HIPDNN_VERSION}\"")
