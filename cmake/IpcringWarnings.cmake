# Warning and sanitizer flags, applied per target (no global flags).
function(ipcring_target_defaults target)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion
    -Wno-sign-conversion -Wnon-virtual-dtor -Wold-style-cast -Wcast-align)
  if(IPCRING_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(IPCRING_SANITIZE)
    string(REPLACE ";" "," _san "${IPCRING_SANITIZE}")
    target_compile_options(${target} PRIVATE -fsanitize=${_san} -fno-omit-frame-pointer
      -fno-sanitize-recover=all)
    target_link_options(${target} PRIVATE -fsanitize=${_san})
  endif()
endfunction()
