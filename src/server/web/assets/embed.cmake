# Turns every web file in ASSET_DIR into a C++ byte array in OUTPUT (a .cc defining
# rrpc::kEmbeddedWebAssets, declared in server/web/web_assets.h), so the binary serves the
# dashboard with no files on disk.
#
#   cmake -DASSET_DIR=<dir> -DOUTPUT=<file.cc> -P embed.cmake
if(NOT ASSET_DIR OR NOT OUTPUT)
  message(FATAL_ERROR "usage: cmake -DASSET_DIR=<dir> -DOUTPUT=<file.cc> -P embed.cmake")
endif()

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

set(content "// Generated from src/server/web/assets/ by embed.cmake; do not edit.
#include \"server/web/web_assets.h\"

namespace rrpc {
namespace {

${arrays}}  // namespace

const EmbeddedFile kEmbeddedWebAssets[] = {
${table}};
const size_t kNumEmbeddedWebAssets = ${index};

}  // namespace rrpc
")
file(WRITE "${OUTPUT}" "${content}")
