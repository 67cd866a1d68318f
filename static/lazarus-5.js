// Lazarus: the little script the pages need (no inline script anywhere).
// Shows each <time data-local> in the browser's own time zone beside the UTC time.
function showLocalTimes(root) {
  root.querySelectorAll("time[data-local]").forEach(function (el) {
    if (el.dataset.done) return;
    var d = new Date(el.getAttribute("datetime"));
    if (isNaN(d)) return;
    var span = document.createElement("span");
    span.className = "muted";
    span.textContent = " (" + d.toLocaleString() + " local)";
    el.after(span);
    el.dataset.done = "1";
  });
}
// Shows "3 min ago" beside each <time data-ago>, kept up to date.
function ago(date) {
  var s = Math.round((Date.now() - date.getTime()) / 1000);
  if (s < 45) return "just now";
  var units = [[86400, "d"], [3600, "h"], [60, "min"]];
  for (var i = 0; i < units.length; i++) {
    if (s >= units[i][0]) return Math.floor(s / units[i][0]) + " " + units[i][1] + " ago";
  }
  return "just now";
}
function showAgo(root) {
  root.querySelectorAll("time[data-ago]").forEach(function (el) {
    var d = new Date(el.getAttribute("datetime"));
    if (isNaN(d)) return;
    var span = el.nextElementSibling;
    if (!span || !span.classList.contains("ago")) {
      span = document.createElement("span");
      span.className = "ago";
      el.after(span);
    }
    span.textContent = " · " + ago(d);
  });
}
document.addEventListener("DOMContentLoaded", function () { showLocalTimes(document); showAgo(document); });
document.addEventListener("htmx:afterSwap", function (e) { showLocalTimes(e.target); showAgo(document); });
setInterval(function () { showAgo(document); }, 30000);
// A form answered beside itself starts each request with its old error gone.
document.addEventListener("htmx:beforeRequest", function (e) {
  var form = e.detail.elt.closest && e.detail.elt.closest("[data-errors]");
  var place = form && document.getElementById(form.dataset.errors);
  if (place) { place.textContent = ""; place.classList.remove("error-box"); }
});
// A part that refreshes itself (hx-trigger="every ...") waits while someone fills a form in it.
document.addEventListener("htmx:beforeRequest", function (e) {
  var elt = e.detail.elt;
  if (!elt.id || elt.id !== "live") return;
  var busy = elt.querySelector("details[open]") ||
    (document.activeElement && elt.contains(document.activeElement) && document.activeElement.matches("input, textarea, select"));
  if (busy) e.preventDefault();
});
// The server cannot be reached at all (it stopped, or the network is down): one toast that
// says so, gone once a request gets through again.
function unreachable(show) {
  var box = document.getElementById("unreachable");
  if (!show) { if (box) box.remove(); return; }
  if (box) return;
  box = document.createElement("div");
  box.id = "unreachable";
  box.className = "error-box";
  box.setAttribute("role", "alert");
  box.textContent = "Lazarus cannot be reached: this page is not up to date. Retrying…";
  document.getElementById("toasts").appendChild(box);
}
document.addEventListener("htmx:sendError", function () { unreachable(true); });
document.addEventListener("htmx:afterRequest", function (e) { if (e.detail.xhr && e.detail.xhr.status) unreachable(false); });
// The message of an error answer, as text: the "error" of a JSON answer, the text of an
// HTML one (parsed, not shown: entities read as the characters they stand for, and nothing
// in it runs), else the status.
function errorMessage(xhr) {
  var body = xhr.responseText || "";
  var type = xhr.getResponseHeader("Content-Type") || "";
  if (type.indexOf("json") !== -1) {
    try {
      var json = JSON.parse(body);
      if (json && typeof json.error === "string") return json.error;
    } catch (_) { /* not JSON after all: read it as text */ }
  }
  var text = body;
  if (type.indexOf("html") !== -1) {
    var page = new DOMParser().parseFromString(body, "text/html");
    var box = page.querySelector(".error-box") || page.body;
    text = box ? box.textContent : "";
  }
  text = text.replace(/\s+/g, " ").trim();
  return (text || (xhr.status + " " + xhr.statusText)).slice(0, 300);
}
// htmx errors (a 4xx/5xx answer to a partial request) become a toast with the server's message.
document.addEventListener("htmx:responseError", function (e) {
  // A form that names a place for its errors (data-errors) is answered there, beside it.
  var form = e.detail.elt.closest && e.detail.elt.closest("[data-errors]");
  var place = form && document.getElementById(form.dataset.errors);
  if (place) {
    place.textContent = errorMessage(e.detail.xhr);
    place.classList.add("error-box");
    return;
  }
  var box = document.createElement("div");
  box.className = "error-box";
  box.setAttribute("role", "alert");
  box.textContent = errorMessage(e.detail.xhr);
  document.getElementById("toasts").appendChild(box);
  setTimeout(function () { box.remove(); }, 8000);
});
// Row selection (for replay): "select page" ticks every row; the count follows, and says
// "all 1,234 selected" when every match is.
document.addEventListener("change", function (e) {
  var rows = document.querySelectorAll("input.select-row");
  if (e.target.id === "select-page") rows.forEach(function (r) { r.checked = e.target.checked; });
  var count = document.getElementById("selected-count");
  if (!count) return;
  var all = document.getElementById("select-all-matching");
  if (all && all.checked) {
    var matched = document.getElementById("match-count");
    var n = matched ? matched.textContent.replace(/ (match|message matches)$/, "") : "";
    count.textContent = /^[0-9,]+$/.test(n) ? "all " + n + " selected" : "all of them selected";
    return;
  }
  var ticked = Array.prototype.filter.call(rows, function (r) { return r.checked; }).length;
  count.textContent = ticked + " selected on this page";
});
// The list's filters leave empty fields out of the request, so the URL pushed into the
// history holds only the filters in use.
document.addEventListener("htmx:configRequest", function (e) {
  if (!e.detail.elt.matches || !e.detail.elt.matches("form[data-drop-empty]")) return;
  var params = e.detail.parameters;
  Object.keys(params).forEach(function (k) {
    if (typeof params[k] === "string" && params[k].trim() === "") delete params[k];
  });
});
