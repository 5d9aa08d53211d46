// What every data page (web_pages.h) shares: the frame around its content (document head and the
// dashboard's top bar, from templates/page.html), tables in panels, HTML escaping, and the
// registration of a page that answers HTML, or JSON with `?format=json`. The builders append to
// a caller's string and the frame is read-only, so any thread may use them (pages run on the web
// server's threads, several at once).
//
//   std::string content;
//   BeginTable("Flags", "12", "", {{"Name", false}, {"Value", false}}, &content);
//   content += "<tr>";
//   Cell("mono", name, &content);
//   ...
//   EndTable(&content);
//   return RenderPage(env, {"Flags", "/varz", "every flag"}, content);
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace rrpc {

class Webserver;
struct WebResponse;

namespace web_page {

constexpr char kHtmlContentType[] = "text/html; charset=utf-8";

// What every page shows besides its own content. Fixed once the pages are registered.
struct PageEnv {
  std::string server_name;  // in the top bar and the title
};

// A page's title line.
struct PageHead {
  std::string_view title;     // e.g. "RPCs"
  std::string_view path;      // e.g. "/rpcz": highlighted in the top bar, and its JSON link
  std::string_view subtitle;  // one line on what the page shows
};

// Appends `s` with &, <, >, " and ' replaced by entities: safe as HTML text and attribute values.
void AppendEscaped(std::string_view s, std::string* out);

// The whole document: the page frame around `content` (HTML, inserted as it is).
std::string RenderPage(const PageEnv& env, const PageHead& head, std::string_view content);

// A section: a heading with a count and a note (either may be empty), then a table in a panel
// with these columns (numeric ones are right-aligned). Rows follow, then EndTable.
struct Column {
  const char* name;
  bool numeric;
};
void BeginTable(std::string_view heading, std::string_view count, std::string_view note,
                const std::vector<Column>& columns, std::string* out);
void EndTable(std::string* out);

// A row with one cell across `columns` columns saying `text` (e.g. "No calls in flight.").
void EmptyRow(size_t columns, std::string_view text, std::string* out);

// One cell of `text`, with the CSS classes `cls` (may be empty).
void Cell(std::string_view cls, std::string_view text, std::string* out);

// A method as the dashboard shows it: the service muted, the method bold.
void MethodCell(std::string_view service, std::string_view method, std::string* out);

// A state ("queued", "open", ...) as a coloured pill; pages.css colours it by its name.
void PillCell(std::string_view state, std::string* out);

// Asks the browser not to cache the answer: every load shows fresh values.
void NoStore(WebResponse* resp);

// Serves `path` on `web`: the document `html` builds, or the JSON `json` builds when the request
// has ?format=json. Never cached.
void RegisterHtmlOrJsonPage(Webserver* web, const std::string& path,
                            std::function<std::string()> html, std::function<std::string()> json);

}  // namespace web_page
}  // namespace rrpc
