# Eclipse Cyclone DDS for ringbridge (tools/ringbridge). Only the bridge and its tests use it; the
# library never does. IPCRING_WITH_DDS: AUTO (use it when found), ON (required), OFF.
# Sets IPCRING_HAVE_DDS. AUTO leaves it off under ThreadSanitizer: libddsc is not instrumented,
# so its own threads would make every bridge test report races that are not ours.
set(IPCRING_HAVE_DDS OFF)
if(NOT IPCRING_WITH_DDS STREQUAL "OFF" AND IPCRING_BUILD_TOOLS)
  set(_dds_wanted ON)
  if(IPCRING_WITH_DDS STREQUAL "AUTO" AND IPCRING_SANITIZE MATCHES "thread")
    set(_dds_wanted OFF)
    message(STATUS "ringbridge: off under ThreadSanitizer (IPCRING_WITH_DDS=AUTO)")
  endif()
  if(_dds_wanted)
    find_package(CycloneDDS 0.10 CONFIG QUIET)
    find_program(IPCRING_IDLC idlc)
    if(CycloneDDS_FOUND AND IPCRING_IDLC)
      set(IPCRING_HAVE_DDS ON)
      enable_language(C)
      message(STATUS "ringbridge: Cyclone DDS ${CycloneDDS_VERSION}, idlc ${IPCRING_IDLC}")
    elseif(IPCRING_WITH_DDS STREQUAL "ON")
      message(FATAL_ERROR "IPCRING_WITH_DDS=ON but Cyclone DDS was not found (CycloneDDS_FOUND="
                          "${CycloneDDS_FOUND}, idlc=${IPCRING_IDLC}): install cyclonedds-dev and "
                          "cyclonedds-tools (scripts/install-deps.sh)")
    else()
      message(STATUS "ringbridge: not built (Cyclone DDS or idlc not found)")
    endif()
  endif()
endif()
