# Whether a fully static link of the binary can be made here (issue 41): libarchive's static
# archive and those its pkg-config file lists as private (nettle, acl, lzma, zstd, lz4, bz2, z,
# xml2), and glibc's libc.a. A machine set up for the demo alone has the shared libraries but not
# every static archive; there the static twin is left out, not a link that fails.

# The Debian package that ships lib<name>.a, for the message that names what to install.
set(OVERLAY_STATIC_ARCHIVE_PACKAGES
  archive=libarchive-dev nettle=nettle-dev acl=libacl1-dev lzma=liblzma-dev zstd=libzstd-dev
  lz4=liblz4-dev bz2=libbz2-dev z=zlib1g-dev xml2=libxml2-dev c=libc6-dev)

# Sets OUT_LIBS to the static archives that are missing ("libacl.a;…", or "pkg-config" where
# pkg-config itself is), OUT_PACKAGES to the Debian packages that provide them, and, where none
# is missing, ARCHIVE_STATIC_STATIC_LIBRARIES (what to link) in the caller's scope.
function(overlay_missing_static_archives out_libs out_packages)
  find_package(PkgConfig QUIET)
  if(NOT PKG_CONFIG_FOUND)
    set(${out_libs} pkg-config PARENT_SCOPE)
    set(${out_packages} pkg-config PARENT_SCOPE)
    return()
  endif()
  pkg_check_modules(ARCHIVE_STATIC QUIET libarchive)
  if(NOT ARCHIVE_STATIC_FOUND)
    set(${out_libs} libarchive.pc PARENT_SCOPE)
    set(${out_packages} libarchive-dev PARENT_SCOPE)
    return()
  endif()
  set(libs)
  set(packages)
  # Cross-compiling (the aarch64 preset): the packages are the target's, by their Debian arch name.
  set(OVERLAY_PACKAGE_ARCH_SUFFIX)
  if(CMAKE_CROSSCOMPILING AND CMAKE_SYSTEM_PROCESSOR STREQUAL "aarch64")
    set(OVERLAY_PACKAGE_ARCH_SUFFIX ":arm64")
  endif()
  foreach(name IN LISTS ARCHIVE_STATIC_STATIC_LIBRARIES ITEMS c)
    # NO_CACHE: asked afresh at each configure, so installing the package is enough; unset first,
    # as find_library does not search again for a variable that already holds a path.
    unset(archive)
    find_library(archive NAMES lib${name}.a NO_CACHE
                 PATHS ${ARCHIVE_STATIC_STATIC_LIBRARY_DIRS} ${CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES})
    if(NOT archive)
      list(APPEND libs lib${name}.a)
      set(package lib${name}-dev)
      foreach(pair IN LISTS OVERLAY_STATIC_ARCHIVE_PACKAGES)
        if(pair MATCHES "^${name}=(.*)$")
          set(package ${CMAKE_MATCH_1})
        endif()
      endforeach()
      list(APPEND packages ${package}${OVERLAY_PACKAGE_ARCH_SUFFIX})
    endif()
  endforeach()
  set(${out_libs} "${libs}" PARENT_SCOPE)
  set(${out_packages} "${packages}" PARENT_SCOPE)
  set(ARCHIVE_STATIC_STATIC_LIBRARIES "${ARCHIVE_STATIC_STATIC_LIBRARIES}" PARENT_SCOPE)
endfunction()
