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
document.addEventListener("DOMContentLoaded", function () { showLocalTimes(document); });
document.addEventListener("htmx:afterSwap", function (e) { showLocalTimes(e.target); });
// htmx errors (a 4xx/5xx answer to a partial request) become a toast with the server's message.
document.addEventListener("htmx:responseError", function (e) {
  var box = document.createElement("div");
  box.className = "error-box";
  box.setAttribute("role", "alert");
  box.textContent = e.detail.xhr.responseText.replace(/<[^>]*>/g, " ").replace(/\s+/g, " ").trim().slice(0, 300);
  document.getElementById("toasts").appendChild(box);
  setTimeout(function () { box.remove(); }, 8000);
});
// Row selection (for replay): "select page" ticks every row; the count follows.
document.addEventListener("change", function (e) {
  var rows = document.querySelectorAll("input.select-row");
  if (e.target.id === "select-page") rows.forEach(function (r) { r.checked = e.target.checked; });
  var count = document.getElementById("selected-count");
  if (count) count.textContent = Array.prototype.filter.call(rows, function (r) { return r.checked; }).length;
});
