# Turns every web file in ASSET_DIR into a C++ byte array in OUTPUT: a .cc defining the table
# rrpc::<SYMBOL> and its length rrpc::kNum<SYMBOL without its leading k> (declared in
# server/web/web_assets.h), so the binary serves the web UI with no files on disk. Run once for
# the static files (assets/ -> kEmbeddedWebAssets) and once for the page templates (templates/ ->
# kEmbeddedWebTemplates).
#
#   cmake -DASSET_DIR=<dir> -DOUTPUT=<file.cc> -DSYMBOL=kEmbeddedWebAssets -P embed.cmake
if(NOT ASSET_DIR OR NOT OUTPUT OR NOT SYMBOL MATCHES "^k[A-Za-z0-9]+$")
  message(FATAL_ERROR
    "usage: cmake -DASSET_DIR=<dir> -DOUTPUT=<file.cc> -DSYMBOL=k<Name> -P embed.cmake")
endif()
string(SUBSTRING "${SYMBOL}" 1 -1 symbol_name)
get_filename_component(dir_name "${ASSET_DIR}" NAME)

file(GLOB assets RELATIVE "${ASSET_DIR}"
  "${ASSET_DIR}/*.html" "${ASSET_DIR}/*.css" "${ASSET_DIR}/*.js" "${ASSET_DIR}/*.svg"
  "${ASSET_DIR}/*.png" "${ASSET_DIR}/*.ico")
list(SORT assets)

set(arrays "")
set(table "")
set(index 0)
foreach(name ${assets})
  file(READ "${ASSET_DIR}/${name}" hex HEX)
  string(LENGTH "${hex}" hex_len)
  if(hex_len EQUAL 0)
    set(bytes "0")
    set(size 0)
  else()
    math(EXPR size "${hex_len} / 2")
    # 16 bytes per line, each as 0xNN.
    string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
    string(REPEAT "0x[0-9a-f][0-9a-f]," 16 line_pattern)
    string(REGEX REPLACE "(${line_pattern})" "\\1\n    " bytes "${bytes}")
    string(REGEX REPLACE ",(\n    )?$" "" bytes "${bytes}")
    set(bytes "\n    ${bytes}")
  endif()
  string(APPEND arrays "// ${name}\nconst unsigned char kAsset${index}[] = {${bytes}};\n\n")
  string(APPEND table "    {\"${name}\", kAsset${index}, ${size}},\n")
  math(EXPR index "${index} + 1")
endforeach()

if(index EQUAL 0)
  message(FATAL_ERROR "no web assets found in ${ASSET_DIR}")
endif()

set(content "// Generated from src/server/web/${dir_name}/ by embed.cmake; do not edit.
#include \"server/web/web_assets.h\"

namespace rrpc {
namespace {

${arrays}}  // namespace

const EmbeddedFile ${SYMBOL}[] = {
${table}};
const size_t kNum${symbol_name} = ${index};

}  // namespace rrpc
")
file(WRITE "${OUTPUT}" "${content}")
