# Installs the built project into a scratch prefix other than the configured CMAKE_INSTALL_PREFIX
# (as README's `cmake --install build/default --prefix /opt/ipcring` does), then builds and runs a
# consumer against it twice: a CMake project with find_package(ipcring CONFIG REQUIRED), and the
# same program compiled by hand with the flags `pkg-config ipcring` gives (ipcring.pc must find
# the prefix it was installed to, not the configured one).
#   -DSOURCE_DIR -DBINARY_DIR -DWORK_DIR -DCXX (the C++ compiler for the pkg-config consumer)
file(REMOVE_RECURSE ${WORK_DIR})
load_cache(${BINARY_DIR} READ_WITH_PREFIX configured_ CMAKE_INSTALL_PREFIX)
if(configured_CMAKE_INSTALL_PREFIX STREQUAL "${WORK_DIR}/prefix")
  message(FATAL_ERROR "the scratch prefix is the configured one; the check would prove nothing")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "install failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/consumer -B ${WORK_DIR}/build
                -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the consumer failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer failed: ${rc}")
endif()
execute_process(COMMAND ${WORK_DIR}/build/app RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the consumer failed: ${rc}")
endif()
file(GLOB pc ${WORK_DIR}/prefix/lib*/pkgconfig/ipcring.pc ${WORK_DIR}/prefix/lib/*/pkgconfig/ipcring.pc)
if(NOT pc)
  message(FATAL_ERROR "ipcring.pc was not installed")
endif()

# The pkg-config consumer: the flags must name the scratch prefix, and the program built with
# them alone must compile, link and run.
list(GET pc 0 pc)
get_filename_component(pc_dir ${pc} DIRECTORY)
find_program(PKG_CONFIG pkg-config REQUIRED)
set(ENV{PKG_CONFIG_PATH} ${pc_dir})
execute_process(COMMAND ${PKG_CONFIG} --cflags --libs ipcring RESULT_VARIABLE rc
                OUTPUT_VARIABLE pc_flags OUTPUT_STRIP_TRAILING_WHITESPACE)
if(rc)
  message(FATAL_ERROR "pkg-config ipcring failed (${rc}) with PKG_CONFIG_PATH=${pc_dir}")
endif()
execute_process(COMMAND ${PKG_CONFIG} --variable=includedir ipcring
                OUTPUT_VARIABLE pc_include OUTPUT_STRIP_TRAILING_WHITESPACE)
file(REAL_PATH ${WORK_DIR}/prefix/include real_include)
if(NOT IS_DIRECTORY "${pc_include}")
  set(pc_include_real "${pc_include} (no such directory)")
else()
  file(REAL_PATH "${pc_include}" pc_include_real)
endif()
if(NOT pc_include_real STREQUAL real_include)
  message(FATAL_ERROR "pkg-config ipcring gives includedir '${pc_include}' ('${pc_flags}'): not "
                      "${WORK_DIR}/prefix/include, where it was installed (configured prefix "
                      "${configured_CMAKE_INSTALL_PREFIX})")
endif()
separate_arguments(pc_flag_list UNIX_COMMAND "${pc_flags}")
execute_process(COMMAND ${CXX} -o ${WORK_DIR}/app_pkgconfig
                        ${SOURCE_DIR}/tests/install/consumer/app.cpp ${pc_flag_list}
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer with `pkg-config --cflags --libs ipcring` "
                      "('${pc_flags}') failed: ${rc}")
endif()
execute_process(COMMAND ${WORK_DIR}/app_pkgconfig RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the pkg-config consumer failed: ${rc}")
endif()
message(STATUS "consumer built (find_package and pkg-config) and ran against ${WORK_DIR}/prefix "
               "(configured prefix ${configured_CMAKE_INSTALL_PREFIX}); pkg-config file ${pc}")
