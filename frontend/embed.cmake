# Embed a text file as a C byte array, at build time:
#   cmake -DIN=file -DOUT=file.c -DSYM=var -DSYM_NAME=var2 -DNAME=label -P embed.cmake
# defines `const char var[]` (the file's bytes and a final 0) and `const char var2[] = "label"`.
# A byte array, not a string literal: C11 only promises string literals of 4095 characters.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" nhex)
math(EXPR nbytes "${nhex} / 2")
# 16 bytes a line
string(REPEAT "[0-9a-f]" 32 line)
string(REGEX REPLACE "(${line})" "\\1\n    " hex "${hex}")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1', " bytes "${hex}")
string(REPLACE ", \n" ",\n" bytes "${bytes}")
get_filename_component(base "${IN}" NAME)
file(WRITE "${OUT}"
  "/* Generated from ${base} by embed.cmake: do not edit. */\n"
  "#include \"frontend/frontend.h\"\n\n"
  "const char ${SYM}[${nbytes} + 1] = {\n    ${bytes}0\n};\n"
  "const char ${SYM_NAME}[] = \"${NAME}\";\n")
