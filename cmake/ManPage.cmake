# Generates overlay.1 with help2man at build time, so the man page never drifts from --help.
# Every subcommand's own --help becomes a subsection of SUBCOMMANDS.
# cmake -DOVERLAY=<binary> -DHELP2MAN=<help2man> -DSTATIC=<overlay.h2m> -DOUT=<overlay.1> -P ManPage.cmake
execute_process(COMMAND ${OVERLAY} --help OUTPUT_VARIABLE top RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${OVERLAY} --help failed")
endif()
string(REGEX REPLACE ".*\nSubcommands:\n" "" subs_text "${top}")
string(REGEX MATCHALL "\n  [a-z][a-z-]*" subs "\n${subs_text}")
set(gen "[SUBCOMMANDS]\n")
foreach(s IN LISTS subs)
  string(STRIP "${s}" s)
  execute_process(COMMAND ${OVERLAY} ${s} --help OUTPUT_VARIABLE text)
  string(REPLACE "\\" "\\\\" text "${text}")
  string(APPEND gen ".SS ${s}\n.nf\n${text}.fi\n")
endforeach()
file(READ ${STATIC} static_text)
file(WRITE ${OUT}.h2m "${gen}\n${static_text}")
execute_process(COMMAND ${HELP2MAN} --no-info --no-discard-stderr
                        --name "deploy an optimised kernel into a live install in place and restore every byte"
                        --include ${OUT}.h2m --output ${OUT} ${OVERLAY}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "help2man failed")
endif()
