// The pages' only script besides htmx (no inline script: the CSP forbids it).
// A poll waits while the tab is hidden, and while the operator is in the middle of
// something the swap would wipe: an open confirmation, ticked boxes, a field being typed in.
function busy(elt) {
  if (elt.querySelector(".confirm-slot:not(:empty), #task-confirm:not(:empty)")) return true;
  if (elt.querySelector("input[type=checkbox]:checked")) return true;
  var active = document.activeElement;
  return !!(active && active !== document.body && elt.contains(active) &&
            active.matches("input, textarea, select"));
}
document.addEventListener("htmx:beforeRequest", function (event) {
  var elt = event.detail.elt;
  if (elt && elt.hasAttribute && elt.hasAttribute("data-poll") && (document.hidden || busy(elt))) {
    event.preventDefault();
  }
});
document.addEventListener("click", function (event) {
  var close = event.target.closest && event.target.closest("[data-close]");
  var slot = close && close.closest(".confirm-slot, #task-confirm");
  if (slot) {
    event.preventDefault();
    slot.innerHTML = "";
  }
});
