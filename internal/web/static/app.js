// once dashboard: times in the reader's zone when they chose local, and the live leases table.
"use strict";
(function () {
  function localTimes(root) {
    if (document.documentElement.dataset.tz !== "local") return;
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      var d = new Date(el.getAttribute("datetime"));
      if (!isNaN(d)) el.textContent = d.toLocaleString(undefined, { timeZoneName: "short" });
    });
  }
  function cell(text) {
    var td = document.createElement("td");
    td.textContent = text;
    return td;
  }
  function timeCell(iso) {
    var td = document.createElement("td"), t = document.createElement("time");
    t.setAttribute("datetime", iso);
    t.textContent = iso.replace("T", " ").replace(/\.\d+Z$/, "Z");
    td.appendChild(t);
    return td;
  }
  function progressCell(l) {
    var td = document.createElement("td");
    if (l.total > 0) {
      var p = document.createElement("progress");
      p.max = l.total; p.value = l.done;
      var s = document.createElement("span");
      s.className = "pct";
      s.textContent = " " + Math.round(100 * l.done / l.total) + "%";
      td.appendChild(p); td.appendChild(s);
    } else {
      td.textContent = l.progress || "-";
    }
    return td;
  }
  function live(table) {
    var url = table.dataset.live, body = table.querySelector("tbody"), none = document.getElementById("no-leases");
    function tick() {
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
        .then(function (j) {
          var rows = document.createDocumentFragment();
          (j.leases || []).forEach(function (l) {
            var tr = document.createElement("tr");
            tr.dataset.task = l.task;
            [cell(l.task), cell(l.slot || "-"), cell(l.holder), cell(String(l.token)), progressCell(l),
              cell(String(l.records)), timeCell(l.acquired), timeCell(l.expires)].forEach(function (td) { tr.appendChild(td); });
            rows.appendChild(tr);
          });
          body.replaceChildren(rows);
          if (none) none.hidden = (j.leases || []).length > 0;
          localTimes(body);
        })
        .catch(function () {})
        .finally(function () { setTimeout(tick, 1000); });
    }
    setTimeout(tick, 1000);
  }
  document.addEventListener("DOMContentLoaded", function () {
    localTimes(document);
    var t = document.getElementById("leases");
    if (t) live(t);
  });
})();
