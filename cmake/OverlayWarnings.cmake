# Warnings on, everywhere, for GCC and Clang alike.
function(overlay_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion
    -Wno-sign-conversion -Wnon-virtual-dtor -Wold-style-cast -Woverloaded-virtual)
  # GCC 12 reports a false -Wrestrict inside libstdc++ for `"x" + std::string` at -O3
  # (GCC bug 105651); it is not about our code.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12
     AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${target} PRIVATE -Wno-restrict)
  endif()
  if(OVERLAY_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
