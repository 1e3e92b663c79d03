# CMake package config for DeviceKit plugins.
#
#   find_package(devicekit 1.0 REQUIRED)   # CMAKE_PREFIX_PATH=$(devicekit --cmake-dir)
#   target_link_libraries(my_plugin PRIVATE devicekit::device_api)
#
# devicekit::device_api is header-only: it adds the include path of
# devicekit/device_api.h and nothing else, so a plugin never links against
# DeviceKit or Python.
get_filename_component(_devicekit_root "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
if(NOT TARGET devicekit::device_api)
  add_library(devicekit::device_api INTERFACE IMPORTED)
  set_target_properties(devicekit::device_api PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${_devicekit_root}/include")
endif()
set(devicekit_INCLUDE_DIR "${_devicekit_root}/include")
unset(_devicekit_root)
