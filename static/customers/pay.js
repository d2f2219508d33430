// The customer's pages' only script besides htmx (no inline script: the CSP forbids it).
// Without it the pages still work: times stay in UTC, the form posts, the page refreshes.

// Times in the customer's own zone (the browser's), with UTC kept on hover; UTC if the
// browser cannot say. Written as the server wrote them (commerce/customers/dates.py): English
// month names, in the order the server chose from the reader's language (data-order: "mdy",
// December 3, 2026; "dmy", 3 December 2026), so one page never mixes the two.
var PARTS = { year: "numeric", month: "long", day: "numeric", hour: "2-digit",
              minute: "2-digit", hourCycle: "h23", timeZoneName: "short" };
function timeText(at, order, withTime) {
  var p = {};
  new Intl.DateTimeFormat("en-US", PARTS).formatToParts(at).forEach(function (part) {
    p[part.type] = part.value;
  });
  var date = order === "mdy" ? p.month + " " + p.day + ", " + p.year
                             : p.day + " " + p.month + " " + p.year;
  return withTime ? date + ", " + p.hour + ":" + p.minute + " " + p.timeZoneName : date;
}
function localTimes(root) {
  root.querySelectorAll("time[data-local]").forEach(function (el) {
    var at = new Date(el.getAttribute("datetime"));
    if (isNaN(at.getTime())) return;
    try {
      var order = el.getAttribute("data-order") === "mdy" ? "mdy" : "dmy";
      el.textContent = timeText(at, order, el.getAttribute("data-local") !== "date");
      el.setAttribute("data-localized", "");
    } catch (e) { /* keep the UTC text */ }
  });
}
document.addEventListener("DOMContentLoaded", function () { localTimes(document); });
document.addEventListener("htmx:afterSwap", function () { localTimes(document); });
document.addEventListener("htmx:oobAfterSwap", function (event) { localTimes(event.detail.target); });

// The page checking a payment polls only while it is seen.
document.addEventListener("htmx:beforeRequest", function (event) {
  var elt = event.detail.elt;
  if (elt && elt.hasAttribute && elt.hasAttribute("data-poll") && document.hidden) {
    event.preventDefault();
  }
});

// One press pays once: the button is disabled as the form leaves (the server refuses a
// second payment anyway, under a lock on the invoice).
document.addEventListener("submit", function (event) {
  var form = event.target;
  if (!form.hasAttribute || !form.hasAttribute("data-once")) return;
  if (form.getAttribute("data-sent")) { event.preventDefault(); return; }
  form.setAttribute("data-sent", "1");
  var button = form.querySelector("button[type=submit]");
  if (button) {
    button.setAttribute("aria-disabled", "true");
    button.textContent = "Paying…";
  }
});

// A paid page's receipt prints (the print stylesheet keeps the receipt alone); the button is
// there only with the script, which it needs — also once a checked payment swaps to paid.
function printButtons(root) {
  root.querySelectorAll("[data-print][hidden]").forEach(function (button) {
    button.hidden = false;
    button.addEventListener("click", function () { window.print(); });
  });
}
document.addEventListener("DOMContentLoaded", function () { printButtons(document); });
// An outerHTML swap's target is the element it replaced: look at the document instead.
document.addEventListener("htmx:afterSwap", function () { printButtons(document); });
