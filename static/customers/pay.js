// The customer's pages' only script besides htmx (no inline script: the CSP forbids it).
// Without it the pages still work: times stay in UTC, the form posts, the page refreshes.

// Times in the customer's own zone (the browser's), with UTC kept on hover; UTC if the
// browser cannot say.
var FORMATS = {
  date: { year: "numeric", month: "long", day: "numeric" },
  datetime: { year: "numeric", month: "long", day: "numeric", hour: "2-digit",
              minute: "2-digit", timeZoneName: "short" }
};
function localTimes(root) {
  root.querySelectorAll("time[data-local]").forEach(function (el) {
    var at = new Date(el.getAttribute("datetime"));
    if (isNaN(at.getTime())) return;
    try {
      var format = FORMATS[el.getAttribute("data-local")] || FORMATS.datetime;
      el.textContent = new Intl.DateTimeFormat(undefined, format).format(at);
      el.setAttribute("data-localized", "");
    } catch (e) { /* keep the UTC text */ }
  });
}
document.addEventListener("DOMContentLoaded", function () { localTimes(document); });
document.addEventListener("htmx:afterSwap", function (event) { localTimes(event.detail.target); });
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
