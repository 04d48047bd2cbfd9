# cuda.cmake — the CUDA backend (included by src/CMakeLists.txt).
#
# IPCRING_WITH_CUDA (cache, top-level CMakeLists.txt):
#   AUTO  build the CUDA module when find_package(CUDAToolkit) finds a Toolkit (default);
#   ON    require it;
#   OFF   build without it (Backend::cuda then reports Errc::unsupported).
# Sets IPCRING_HAVE_CUDA (a cache entry, so tests/ sees it too).
#
# Two parts (docs/cuda.md, "Host users need no CUDA"):
#  * libipcring always contains the pool logic (cuda_pool.cpp and its parts, no CUDA header: driven by the unit
#    tests' fake CUDA in every build) and the loader (cuda_loader.cpp, dlopen). It links no CUDA
#    library, so host users configure and run without a Toolkit and without libcudart.
#  * libipcring_cuda.so (target ipcring_cuda, a MODULE: nothing links it) binds CudaApi to the CUDA
#    runtime, which it links statically (CUDA::cudart_static): a GPU machine needs the NVIDIA driver
#    only. It never links the driver library (CUDA::cuda_driver): the runtime loads libcuda at run
#    time, and driver entry points ipcring needs are loaded with cudaGetDriverEntryPointByVersion.
#    Its output goes to ${PROJECT_BINARY_DIR}/lib, where the loader finds it from the build tree's
#    executables; it is installed into the library directory beside libipcring.

string(TOUPPER "${IPCRING_WITH_CUDA}" _ipcring_cuda_mode)
if(NOT _ipcring_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "IPCRING_WITH_CUDA must be AUTO, ON or OFF (got '${IPCRING_WITH_CUDA}')")
endif()

set(_ipcring_have_cuda OFF)
if(NOT _ipcring_cuda_mode STREQUAL "OFF")
  if(_ipcring_cuda_mode STREQUAL "ON")
    find_package(CUDAToolkit REQUIRED)
  else()
    find_package(CUDAToolkit QUIET)
  endif()
  if(CUDAToolkit_FOUND AND TARGET CUDA::cudart_static)
    set(_ipcring_have_cuda ON)
  elseif(_ipcring_cuda_mode STREQUAL "ON")
    message(FATAL_ERROR "ipcring: IPCRING_WITH_CUDA=ON, but the CUDA Toolkit found has no static "
                        "runtime (CUDA::cudart_static)")
  endif()
endif()
set(IPCRING_HAVE_CUDA ${_ipcring_have_cuda} CACHE INTERNAL "ipcring is built with the CUDA backend")

include(GNUInstallDirs)
target_sources(ipcring PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/cuda_pool.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_common.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_capability.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_probe.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_vmm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_import.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_producer_pool.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_reader_pool.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_loader.cpp)
target_compile_definitions(ipcring PRIVATE
  IPCRING_INSTALL_LIBDIR="${CMAKE_INSTALL_FULL_LIBDIR}")
target_link_libraries(ipcring PRIVATE ${CMAKE_DL_LIBS})

if(IPCRING_HAVE_CUDA)
  add_library(ipcring_cuda MODULE ${CMAKE_CURRENT_LIST_DIR}/cuda_api_cudart.cpp)
  target_include_directories(ipcring_cuda PRIVATE ${PROJECT_SOURCE_DIR}/include
                             ${CMAKE_CURRENT_LIST_DIR}/../..)
  target_link_libraries(ipcring_cuda PRIVATE CUDA::cudart_static)
  # The static runtime's symbols stay private to the module (--exclude-libs), and the module's
  # calls bind to its own copy (-Bsymbolic), whatever libcudart another library loaded.
  target_link_options(ipcring_cuda PRIVATE -Wl,--exclude-libs,ALL -Wl,-Bsymbolic -Wl,--no-undefined)
  set_target_properties(ipcring_cuda PROPERTIES PREFIX "lib" OUTPUT_NAME ipcring_cuda
    CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
    LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib)
  ipcring_target_defaults(ipcring_cuda)
  add_dependencies(ipcring ipcring_cuda)  # whoever builds the library can use Backend::cuda
  install(TARGETS ipcring_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  message(STATUS "ipcring: CUDA backend ON (CUDA Toolkit ${CUDAToolkit_VERSION}; module "
                 "libipcring_cuda.so with the static CUDA runtime; libipcring links no CUDA)")
else()
  message(STATUS "ipcring: CUDA backend OFF (IPCRING_WITH_CUDA=${IPCRING_WITH_CUDA}; "
                 "Backend::cuda reports Errc::unsupported)")
endif()
