// Live updates: one EventSource per page; the server sends the counts and
// the rows of this page's nodes that changed (never the whole fleet).
"use strict";
(function () {
  const body = document.body;
  // Gantt bars: positions come as data attributes (the CSP forbids inline styles).
  for (const b of document.querySelectorAll(".bar")) {
    b.style.left = b.dataset.left + "%";
    b.style.width = b.dataset.width + "%";
  }
  for (const m of document.querySelectorAll(".reboot")) {
    m.style.left = m.dataset.left + "%";
  }
  let nodes = [];
  if (body.dataset.page === "fleet") {
    nodes = Array.from(document.querySelectorAll("#fleet tbody tr")).map((tr) => tr.dataset.node);
  } else if (body.dataset.page === "node") {
    nodes = [body.dataset.node];
  } else {
    return;
  }
  const q = new URLSearchParams(body.dataset.filter || "");
  q.set("nodes", nodes.join(","));
  const es = new EventSource("/events?" + q.toString());
  const live = document.getElementById("live");
  es.onopen = () => live && live.classList.add("on");
  es.onerror = () => live && live.classList.remove("on");
  const chips = (el, list, cls) => {
    if (!el) return;
    el.replaceChildren(...list.map((c) => {
      const s = document.createElement("span");
      s.className = "chip" + (cls ? " st-" + c.Name : "");
      s.append(c.Name + " ");
      const b = document.createElement("b");
      b.textContent = String(c.N);
      s.append(b);
      return s;
    }));
  };
  es.addEventListener("delta", (ev) => {
    const d = JSON.parse(ev.data);
    const n = document.getElementById("n-nodes");
    if (n) n.textContent = String(d.nodes);
    chips(document.getElementById("by-status"), d.by_status || [], true);
    chips(document.getElementById("by-phase"), d.by_phase || [], false);
    for (const r of d.changed || []) {
      if (body.dataset.page === "node") {
        const st = document.getElementById("run-status");
        if (st && (st.textContent !== r.Status || document.getElementById("run-phase").textContent !== r.Phase)) {
          st.textContent = r.Status;
          document.getElementById("run-phase").textContent = r.Phase;
          body.dataset.updated = String(d.time);
        }
        continue;
      }
      const tr = document.getElementById("n-" + r.Node);
      if (!tr) continue;
      const st = tr.querySelector(".status"), ph = tr.querySelector(".phase"), msg = tr.querySelector(".msg"), pool = tr.querySelector(".pool");
      if (st.textContent === r.Status && ph.textContent === r.Phase && msg.textContent === r.Message && pool.textContent === r.Pool) continue;
      st.textContent = r.Status;
      ph.textContent = r.Phase;
      msg.textContent = r.Message;
      pool.textContent = r.Pool;
      tr.className = "st-" + r.Status + " flash";
      body.dataset.updated = String(d.time);
    }
  });
})();
