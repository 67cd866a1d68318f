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
document.addEventListener("DOMContentLoaded", function () {
  showLocalTimes(document);
  showAgo(document);
  showFlash();
  // Folded filters open by themselves where there is room for them.
  if (window.matchMedia("(min-width: 641px)").matches) {
    document.querySelectorAll("details[data-open-wide]").forEach(function (d) { d.open = true; });
  }
});
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
// Toasts: what a request answered, drawn above everything and announced (#toasts is a live
// region; an error is an alert). They stay until dismissed — an error read later is still
// there — and at most a few are kept, the oldest going first.
function toast(text, kind, id) {
  var box = document.createElement("div");
  box.className = "toast " + (kind === "success" ? "success" : "error-box");
  box.setAttribute("role", kind === "success" ? "status" : "alert");
  if (id) box.id = id;
  var words = document.createElement("span");
  words.className = "toast-text";
  words.textContent = text;
  var close = document.createElement("button");
  close.type = "button";
  close.className = "toast-close";
  close.setAttribute("aria-label", "Dismiss this message");
  // The × is drawn by the stylesheet: the toast's text is only its message.
  close.addEventListener("click", function () { box.remove(); });
  box.appendChild(words);
  box.appendChild(close);
  var toasts = document.getElementById("toasts");
  toasts.appendChild(box);
  while (toasts.children.length > 4) toasts.firstElementChild.remove();
  return box;
}
// The server cannot be reached at all (it stopped, or the network is down): one toast that
// says so, gone once a request gets through again.
function unreachable(show) {
  var box = document.getElementById("unreachable");
  if (!show) { if (box) box.remove(); return; }
  if (box) return;
  toast("Lazarus cannot be reached: this page is not up to date. Retrying…", "error", "unreachable");
}
document.addEventListener("htmx:sendError", function () { unreachable(true); });
document.addEventListener("htmx:afterRequest", function (e) { if (e.detail.xhr && e.detail.xhr.status) unreachable(false); });
// What a form did, said by the page it led to (a cookie the server set on its redirect).
function showFlash() {
  var match = document.cookie.match(/(?:^|; )lazarus_flash=([^;]*)/);
  if (!match) return;
  document.cookie = "lazarus_flash=; Path=/; Max-Age=0; SameSite=Strict";
  var text = "";
  try { text = decodeURIComponent(match[1].replace(/\+/g, " ")); } catch (_) { return; }
  if (text) toast(text, "success");
}
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
  toast(errorMessage(e.detail.xhr), "error");
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
// The keyboard. A skip link moves the focus where it leads. Esc closes the dialog the focus
// is in (a `details.inline-form`, such as "Replay group…", or any `[data-dialog]`), or the
// one opened last, and gives the focus back to what opened it. In the list, arrow keys go
// from the search box to the results and from one result to the next.
document.addEventListener("click", function (e) {
  var skip = e.target.closest && e.target.closest("a.skip");
  var to = skip && document.querySelector(skip.getAttribute("href"));
  if (to) { e.preventDefault(); to.focus(); }
});
document.addEventListener("keydown", function (e) {
  if (e.key === "Escape") {
    var open = Array.prototype.slice.call(document.querySelectorAll("details.inline-form[open], details[data-dialog][open]"));
    if (!open.length) return;
    var inside = open.filter(function (d) { return d.contains(document.activeElement); });
    var dialog = inside.length ? inside[inside.length - 1] : open[open.length - 1];
    dialog.open = false;
    var summary = dialog.querySelector("summary");
    if (summary) summary.focus();
    e.preventDefault();
    return;
  }
  if (e.key !== "ArrowDown" && e.key !== "ArrowUp") return;
  var target = e.target;
  if (!target.closest) return;
  var search = target.closest("input[data-results]");
  var links = function (place) { return Array.prototype.slice.call(place.querySelectorAll("tbody a.row-link")); };
  if (search && e.key === "ArrowDown") {
    var place = document.getElementById(search.dataset.results);
    var first = place && links(place)[0];
    if (first) { e.preventDefault(); first.focus(); }
    return;
  }
  var link = target.closest("a.row-link");
  var results = link && link.closest("[id]");
  if (!link || !results) return;
  var all = links(results);
  var at = all.indexOf(link);
  e.preventDefault();
  if (e.key === "ArrowDown" && at + 1 < all.length) all[at + 1].focus();
  if (e.key === "ArrowUp") {
    if (at > 0) { all[at - 1].focus(); return; }
    var box = document.querySelector("input[data-results='" + results.id + "']");
    if (box) box.focus();
  }
});
// The overview's groups hold still while the page refreshes itself: rows known before a
// refresh keep their order (whatever the sort would say now), groups new to the page join at
// the bottom and are announced (#group-news, a live region outside the refreshing part), and
// the page keeps its scroll position, and the row under the pointer or holding the focus
// stays where it was on the screen — the page scrolls by what the rows above it grew or
// shrank — with the focus given back to it.
var heldGroups = null;
function groupRows(root) {
  var body = root && root.querySelector("#groups tbody");
  return body ? Array.prototype.slice.call(body.querySelectorAll("tr[data-group]")) : [];
}
document.addEventListener("htmx:beforeSwap", function (e) {
  var live = e.detail.target;
  if (!live || live.id !== "live") return;
  var rows = groupRows(live);
  var active = document.activeElement;
  var focused = active && active.closest && active.closest("#groups tr[data-group]");
  var pointed = live.querySelector("#groups tr[data-group]:hover");
  var held = focused || pointed;
  var focusables = held ? Array.prototype.slice.call(held.querySelectorAll("a, button, summary, input, select")) : [];
  heldGroups = {
    // Swapping the part out and in again may take the page back to its top.
    y: window.scrollY,
    order: rows.map(function (r) { return r.dataset.group; }),
    had: !!live.querySelector("#groups"),
    held: held ? { key: held.dataset.group, top: held.getBoundingClientRect().top, focus: focused ? focusables.indexOf(active) : -1 } : null
  };
});
document.addEventListener("htmx:afterSwap", function () {
  if (!heldGroups) return;
  var was = heldGroups;
  heldGroups = null;
  var live = document.getElementById("live");
  var body = live && live.querySelector("#groups tbody");
  if (!body) return;
  var byKey = {};
  groupRows(live).forEach(function (r) { byKey[r.dataset.group] = r; });
  was.order.forEach(function (key) {
    var row = byKey[key];
    if (row) { body.appendChild(row); delete byKey[key]; }
  });
  var fresh = groupRows(live).filter(function (r) { return byKey[r.dataset.group] === r; });
  fresh.forEach(function (row) {
    body.appendChild(row);
    if (was.had) row.classList.add("new-group");
  });
  if (window.scrollY !== was.y) window.scrollTo(window.scrollX, was.y);
  if (was.had && fresh.length) {
    var news = document.getElementById("group-news");
    if (news) news.textContent = fresh.length + (fresh.length === 1 ? " new group" : " new groups") + " at the bottom of the list";
  }
  if (!was.held) return;
  var row = groupRows(live).filter(function (r) { return r.dataset.group === was.held.key; })[0];
  if (!row) return;
  var moved = row.getBoundingClientRect().top - was.held.top;
  if (moved) window.scrollBy(0, moved);
  if (was.held.focus >= 0) {
    var again = row.querySelectorAll("a, button, summary, input, select")[was.held.focus];
    if (again) again.focus({ preventScroll: true });
  }
});
