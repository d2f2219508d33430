// The pages' only script besides htmx (no inline script: the CSP forbids it). Everything
// here makes a page that works without it more comfortable: times in the viewer's zone,
// copy buttons, keyboard shortcuts, focus that follows what just opened.
(function () {
  "use strict";

  // --- Polls wait while the operator is in the middle of something a swap would wipe -------
  function busy(elt) {
    if (elt.querySelector(".confirm-slot:not(:empty)")) return true;
    if (elt.querySelector("input[type=checkbox]:checked")) return true;
    // A section the operator opened to read would close under them.
    if (elt.querySelector("details[open][data-opened]")) return true;
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
    var summary = event.target.closest && event.target.closest("summary");
    var details = summary && summary.parentElement;
    if (details && details.tagName === "DETAILS") {
      if (details.open) details.removeAttribute("data-opened");
      else details.setAttribute("data-opened", "");
    }
  });

  // --- Times: local to the viewer, UTC on hover, and how long ago or how soon --------------
  var pad = function (n) { return (n < 10 ? "0" : "") + n; };
  function local(date, precise) {
    var text = date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate()) +
      " " + pad(date.getHours()) + ":" + pad(date.getMinutes());
    return precise ? text + ":" + pad(date.getSeconds()) : text;
  }
  function relative(date) {
    var seconds = (date.getTime() - Date.now()) / 1000, size = Math.abs(seconds), span;
    if (size < 10) return "just now";
    if (size < 60) span = Math.floor(size) + " s";
    else if (size < 3600) span = Math.floor(size / 60) + " min";
    else if (size < 86400) span = Math.floor(size / 3600) + " h";
    else if (size < 86400 * 60) span = Math.floor(size / 86400) + " d";
    else span = Math.floor(size / (86400 * 30)) + " months";
    return seconds > 0 ? "in " + span : span + " ago";
  }
  // The viewer may read every time in UTC instead (the history's switch), kept for the tab.
  var inUtc = false;
  try { inUtc = window.sessionStorage.getItem("ops-zone") === "utc"; } catch (e) { inUtc = false; }
  function zoneButtons(root) {
    root.querySelectorAll("button[data-zone-toggle]").forEach(function (b) {
      b.hidden = false;
      b.setAttribute("aria-pressed", inUtc ? "true" : "false");
      b.textContent = inUtc ? "Show times in your zone" : "Show times in UTC";
    });
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button[data-zone-toggle]");
    if (!button) return;
    inUtc = !inUtc;
    try { window.sessionStorage.setItem("ops-zone", inUtc ? "utc" : "local"); } catch (e) { /* private mode */ }
    times(document);
    zoneButtons(document);
  });
  var zone = "";
  try { zone = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { zone = ""; }
  function times(root) {
    root.querySelectorAll("time[data-when]").forEach(function (t) {
      var date = new Date(t.getAttribute("datetime"));
      if (isNaN(date.getTime())) return;
      var utc = t.title.replace(/ UTC$/, "") + " UTC";
      t.textContent = inUtc ? utc : local(date, t.hasAttribute("data-precise"));
      t.title = t.title.indexOf("UTC") >= 0 ? t.title : t.title + " UTC";
      if (inUtc) t.removeAttribute("aria-label");
      else if (zone) t.setAttribute("aria-label", t.textContent + " " + zone);
    });
    root.querySelectorAll("[data-rel]").forEach(function (span) {
      var date = new Date(span.getAttribute("data-rel"));
      if (!isNaN(date.getTime())) span.textContent = "(" + relative(date) + ")";
    });
  }

  // --- Copy buttons ----------------------------------------------------------------------
  function copies(root) {
    if (!navigator.clipboard) return;
    root.querySelectorAll("button.copy[hidden]").forEach(function (b) { b.hidden = false; });
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button.copy");
    if (!button) return;
    event.preventDefault();
    navigator.clipboard.writeText(button.getAttribute("data-copy") || "").then(function () {
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = "Copy"; }, 1500);
    });
  });

  // --- Select every task on the page ------------------------------------------------------
  function selectAll(root) {
    root.querySelectorAll("input[data-select-all]").forEach(function (all) {
      all.hidden = false;
    });
  }
  document.addEventListener("change", function (event) {
    var all = event.target;
    if (!all.matches || !all.matches("input[data-select-all]")) return;
    var form = all.closest("form");
    form.querySelectorAll("input[type=checkbox][name=task]").forEach(function (box) {
      box.checked = all.checked;
    });
  });

  // --- Confirmations: focus moves in, Esc closes, focus goes back --------------------------
  var opener = null;
  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail.elt;
    if (elt && elt.matches && elt.matches("a.button[hx-get], button[hx-post]")) opener = elt;
  });
  function close(slot) {
    slot.innerHTML = "";
    if (opener && document.contains(opener)) opener.focus();
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-close]");
    var slot = button && button.closest(".confirm-slot");
    if (slot) {
      event.preventDefault();
      close(slot);
    }
  });
  document.addEventListener("htmx:afterSwap", function (event) {
    var target = event.detail.target;
    times(document);
    copies(document);
    selectAll(document);
    var form = target && target.querySelector && target.querySelector("form.confirm");
    if (form && target.classList.contains("confirm-slot")) {
      var first = form.querySelector("textarea, input:not([type=hidden]), select");
      (first || form.querySelector("h2")).focus();
      return;
    }
    var result = document.getElementById("bulk-result");
    if (result && target && target.id === "task-list") result.focus();
  });

  // --- Keyboard shortcuts -----------------------------------------------------------------
  function typing(elt) {
    return elt && (elt.isContentEditable || elt.matches("input, textarea, select"));
  }
  document.addEventListener("keydown", function (event) {
    var active = document.activeElement;
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && active && active.form) {
      event.preventDefault();
      if (active.form.requestSubmit) active.form.requestSubmit(); else active.form.submit();
      return;
    }
    if (event.key === "Escape") {
      var open = active && active.closest && active.closest(".confirm-slot");
      open = open || document.querySelector(".confirm-slot:not(:empty)");
      if (open && open.innerHTML.trim()) { event.preventDefault(); close(open); }
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey || typing(active)) return;
    if (event.key === "?") {
      var keys = document.getElementById("keys");
      if (keys) { keys.open = true; keys.querySelector("summary").focus(); event.preventDefault(); }
      return;
    }
    if (event.key.length !== 1) return;
    var target = document.querySelector('[data-key="' + CSS.escape(event.key) + '"]');
    if (!target) return;
    event.preventDefault();
    var fold = target.closest("details");
    if (fold && !fold.open) fold.open = true;
    if (target.matches("input, textarea, select")) target.focus();
    else target.click();
  });

  // --- Folds: the list's filters fold on a phone (tasks first), as the viewer last left them --
  var PHONE = window.matchMedia("(max-width: 700px)");
  var folded = {};
  function folds(root) {
    root.querySelectorAll("details[data-fold-phone]").forEach(function (d) {
      d.open = Object.prototype.hasOwnProperty.call(folded, d.id) ? folded[d.id] : !PHONE.matches;
    });
  }
  document.addEventListener("toggle", function (event) {
    var d = event.target;
    if (d.matches && d.matches("details[data-fold-phone]") && d.id) folded[d.id] = d.open;
  }, true);
  document.addEventListener("htmx:afterSwap", function () { folds(document); });

  document.addEventListener("htmx:afterSwap", function () { zoneButtons(document); });

  function ready() {
    zoneButtons(document);
    folds(document);
    times(document);
    copies(document);
    selectAll(document);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", ready);
  else ready();
  // Relative times move on by themselves.
  setInterval(function () {
    document.querySelectorAll("[data-rel]").forEach(function (span) {
      var date = new Date(span.getAttribute("data-rel"));
      if (!isNaN(date.getTime())) span.textContent = "(" + relative(date) + ")";
    });
  }, 30000);
})();
