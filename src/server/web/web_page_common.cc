#include "server/web/web_page_common.h"

#include <glog/logging.h>

#include <utility>

#include "server/web/web_assets.h"
#include "server/web/web_page_format.h"
#include "server/web/webserver.h"
#include "util/metrics/json_writer.h"

namespace rrpc::web_page {

namespace {

struct NavLink {
  const char* path;
  const char* label;
};
// The dashboard's links (assets/index.html), so that every page has the same top bar.
constexpr NavLink kNavLinks[] = {
    {"/metrics", "/metrics"}, {"/metrics.json", "/metrics.json"}, {"/rpcz", "/rpcz"},
    {"/varz", "/varz"},       {"/threadz", "/threadz"},           {"/connections", "/connections"},
    {"/pools", "/pools"},     {"/channels", "/channels"},         {"/healthz", "/healthz"},
};

std::string_view PageTemplate() {
  static const std::string_view page = [] {
    const EmbeddedFile* file =
        FindEmbeddedFile(kEmbeddedWebTemplates, kNumEmbeddedWebTemplates, "page.html");
    CHECK(file != nullptr) << "templates/page.html is not embedded";
    return file->contents();
  }();
  return page;
}

using TemplateValues = std::initializer_list<std::pair<std::string_view, std::string_view>>;

// `tmpl` with each {{name}} replaced by its value in `values`, inserted as it is (the caller
// escapes). A name without a value is a bug in the template: it becomes empty.
std::string FillTemplate(std::string_view tmpl, TemplateValues values, size_t size_hint) {
  std::string out;
  out.reserve(tmpl.size() + size_hint);
  size_t pos = 0;
  for (;;) {
    const size_t open = tmpl.find("{{", pos);
    const size_t close = open == std::string_view::npos ? open : tmpl.find("}}", open + 2);
    if (close == std::string_view::npos) break;
    out.append(tmpl.substr(pos, open - pos));
    const std::string_view name = tmpl.substr(open + 2, close - open - 2);
    bool found = false;
    for (const auto& [key, value] : values) {
      if (key == name) {
        out.append(value);
        found = true;
        break;
      }
    }
    LOG_IF(DFATAL, !found) << "page template names {{" << name << "}}, which has no value";
    pos = close + 2;
  }
  out.append(tmpl.substr(pos));
  return out;
}

std::string Escaped(std::string_view s) {
  std::string out;
  AppendEscaped(s, &out);
  return out;
}

}  // namespace

void AppendEscaped(std::string_view s, std::string* out) {
  for (char c : s) {
    switch (c) {
      case '&':
        *out += "&amp;";
        break;
      case '<':
        *out += "&lt;";
        break;
      case '>':
        *out += "&gt;";
        break;
      case '"':
        *out += "&quot;";
        break;
      case '\'':
        *out += "&#39;";
        break;
      default:
        out->push_back(c);
    }
  }
}

std::string RenderPage(const PageEnv& env, const PageHead& head, std::string_view content) {
  std::string nav;
  for (const NavLink& link : kNavLinks) {
    nav += "    <a href=\"";
    nav += link.path;
    nav += head.path == link.path ? "\" class=\"active\" aria-current=\"page\">" : "\">";
    nav += link.label;
    nav += "</a>\n";
  }
  const std::string server = Escaped(env.server_name);
  const std::string title_server = server.empty() ? "" : " · " + server;
  return FillTemplate(PageTemplate(),
                      {{"title", Escaped(head.title)},
                       {"title_server", title_server},
                       {"server", server},
                       {"nav", nav},
                       {"subtitle", Escaped(head.subtitle)},
                       {"path", Escaped(head.path)},
                       {"content", content},
                       {"generated", Escaped(FormatWallTime(NowUnixMicros()))}},
                      content.size() + nav.size() + 256);
}

void BeginTable(std::string_view heading, std::string_view count, std::string_view note,
                const std::vector<Column>& columns, std::string* out) {
  *out += "<section>\n<div class=\"section-head\"><h2>";
  AppendEscaped(heading, out);
  if (!count.empty()) {
    *out += " <span class=\"count\">";
    AppendEscaped(count, out);
    *out += "</span>";
  }
  *out += "</h2>";
  if (!note.empty()) {
    *out += "<span class=\"note\">";
    AppendEscaped(note, out);
    *out += "</span>";
  }
  *out += "</div>\n<div class=\"table-panel\"><table class=\"data\">\n<thead><tr>";
  for (const Column& column : columns) {
    *out += column.numeric ? "<th class=\"num\">" : "<th>";
    *out += column.name;
    *out += "</th>";
  }
  *out += "</tr></thead>\n<tbody>\n";
}

void EndTable(std::string* out) { *out += "</tbody>\n</table></div>\n</section>\n"; }

void EmptyRow(size_t columns, std::string_view text, std::string* out) {
  *out += "<tr><td class=\"empty-row\" colspan=\"" + std::to_string(columns) + "\">";
  AppendEscaped(text, out);
  *out += "</td></tr>\n";
}

void Cell(std::string_view cls, std::string_view text, std::string* out) {
  if (cls.empty()) {
    *out += "<td>";
  } else {
    *out += "<td class=\"";
    *out += cls;
    *out += "\">";
  }
  AppendEscaped(text, out);
  *out += "</td>";
}

void MethodCell(std::string_view service, std::string_view method, std::string* out) {
  *out += "<td class=\"mono\"><span class=\"svc\">";
  AppendEscaped(service, out);
  *out += ".</span><span class=\"fn\">";
  AppendEscaped(method, out);
  *out += "</span></td>";
}

void PillCell(std::string_view state, std::string* out) {
  *out += "<td><span class=\"pill ";
  AppendEscaped(state, out);
  *out += "\">";
  AppendEscaped(state, out);
  *out += "</span></td>";
}

void NoStore(WebResponse* resp) { resp->headers.emplace_back("Cache-Control", "no-store"); }

void RegisterHtmlOrJsonPage(Webserver* web, const std::string& path,
                            std::function<std::string()> html, std::function<std::string()> json) {
  web->RegisterPage(path, [html = std::move(html), json = std::move(json)](const WebRequest& req,
                                                                           WebResponse* resp) {
    const bool as_json = req.GetParam("format") == "json";
    resp->content_type = as_json ? kJsonContentType : kHtmlContentType;
    resp->body = as_json ? json() : html();
    NoStore(resp);
  });
}

}  // namespace rrpc::web_page
