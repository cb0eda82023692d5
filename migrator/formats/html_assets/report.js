// npu-migrate HTML report. The data is the JSON of #report-data; every text from it is
// written with textContent (never as markup). Rows of the file table are drawn only while in
// view, and a file's diff is built when it is opened.
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("report-data").textContent);
  const SEVERITIES = ["fixed", "manual", "info"];
  const ROW_HEIGHT = 26;
  const LIST_HEIGHT = 440;
  const FOLDER_DEPTH = 2;
  const FOLDERS_SHOWN = 30;
  const app = document.getElementById("app");

  function el(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attributes || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function severityLabel(severity) {
    return severity === "fixed" ? DATA.fixed_label : severity;
  }

  function folderOf(path) {
    const parts = path.split("/");
    parts.pop();
    return parts.length ? parts.slice(0, FOLDER_DEPTH).join("/") : ".";
  }

  // -- per-file facts ---------------------------------------------------------------------------

  const files = DATA.files.map((file, index) => {
    const counts = { fixed: 0, manual: 0, info: 0, error: 0 };
    const codes = new Set();
    for (const row of file.diagnostics) {
      counts[row[4]] = (counts[row[4]] || 0) + 1;
      if (row[4] !== "error") codes.add(row[3]);
    }
    return { index, file, counts, codes, folder: folderOf(file.path), lower: file.path.toLowerCase() };
  });

  // -- explain dialog -----------------------------------------------------------------------------

  const dialog = el("dialog", { id: "explain" });
  const dialogTitle = el("strong");
  const dialogText = el("pre");
  dialog.append(
    el("header", {}, dialogTitle, el("button", { type: "button", onclick: () => dialog.close() }, "Close")),
    dialogText,
  );

  function explain(code) {
    const rule = DATA.rules[code];
    dialogTitle.textContent = rule ? `${code} (${rule.name}): ${rule.summary}` : code;
    dialogText.textContent = rule
      ? `Fix safety: ${rule.fix_safety}\n\n${rule.documentation}`
      : "No documentation: this code belongs to no rule of this run.";
    if (!dialog.open) dialog.showModal();
  }

  function codeButton(code) {
    return el("button", {
      type: "button",
      class: "code-link",
      title: "What this rule does (npu-migrate --explain)",
      "data-code": code,
      onclick: (event) => { event.stopPropagation(); explain(code); },
    }, code);
  }

  // -- summary --------------------------------------------------------------------------------------

  function renderHeader() {
    const summary = DATA.summary;
    const totals = { fixed: 0, manual: 0, info: 0 };
    for (const counts of Object.values(summary.rules)) {
      for (const severity of SEVERITIES) totals[severity] += counts[severity] || 0;
    }
    const cards = [
      ["scanned", summary.scanned, ""],
      [DATA.mode === "check" || DATA.mode === "diff" ? "would change" : "changed", summary.changed, ""],
      ["unchanged", summary.unchanged, ""],
      ["skipped", summary.skipped, "skipped"],
      ["errors", summary.errors, "error"],
      [`${DATA.fixed_label} edits`, totals.fixed, "fixed"],
      ["manual review", totals.manual, "manual"],
      ["info", totals.info, "info"],
    ];
    if (DATA.baseline) cards.push(["in the baseline", DATA.baseline.baselined, ""]);
    app.append(
      el("h1", {}, "npu-migrate report"),
      el("div", { class: "muted" },
        `npu-migrate ${DATA.version}, mode ${DATA.mode}, exit code ${DATA.exit_code}`,
        DATA.arguments.length ? `, paths: ${DATA.arguments.join(" ")}` : ""),
      el("div", { class: "cards", id: "summary" }, cards.map(([label, value, kind]) =>
        el("div", { class: "card" }, el("div", { class: `value ${kind}` }, value), el("div", { class: "label" }, label)))),
    );
    if (DATA.baseline) {
      const stale = DATA.baseline.stale.length;
      app.append(el("div", { class: "muted" },
        `Baseline ${DATA.baseline.file}: ${DATA.baseline.baselined} finding(s) recorded there are not shown; ` +
        `${DATA.baseline.new} new; ${stale} stale entr${stale === 1 ? "y" : "ies"}.`));
    }
  }

  function ruleRows() {
    return Object.entries(DATA.summary.rules)
      .map(([code, counts]) => ({ code, counts, total: SEVERITIES.reduce((sum, s) => sum + (counts[s] || 0), 0) }))
      .sort((a, b) => b.total - a.total || a.code.localeCompare(b.code));
  }

  function renderChart(rows) {
    const SVG = "http://www.w3.org/2000/svg";
    const colors = { fixed: "#1a7f37", manual: "#cf222e", info: "#0969da" };
    const bar = 16, gap = 6, labelWidth = 70, width = 600, countWidth = 60;
    const height = Math.max(1, rows.length) * (bar + gap);
    const max = Math.max(1, ...rows.map((row) => row.total));
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    svg.setAttribute("class", "chart");
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", "findings per rule");
    rows.forEach((row, index) => {
      const y = index * (bar + gap);
      const label = document.createElementNS(SVG, "text");
      label.setAttribute("x", 0);
      label.setAttribute("y", y + bar - 3);
      label.textContent = row.code;
      svg.append(label);
      let x = labelWidth;
      for (const severity of SEVERITIES) {
        const value = row.counts[severity] || 0;
        if (!value) continue;
        const w = (value / max) * (width - labelWidth - countWidth);
        const rect = document.createElementNS(SVG, "rect");
        rect.setAttribute("x", x);
        rect.setAttribute("y", y);
        rect.setAttribute("width", Math.max(w, 1));
        rect.setAttribute("height", bar);
        rect.setAttribute("fill", colors[severity]);
        const title = document.createElementNS(SVG, "title");
        title.textContent = `${row.code}: ${value} ${severityLabel(severity)}`;
        rect.append(title);
        svg.append(rect);
        x += w;
      }
      const count = document.createElementNS(SVG, "text");
      count.setAttribute("x", x + 6);
      count.setAttribute("y", y + bar - 3);
      count.textContent = row.total;
      svg.append(count);
    });
    return svg;
  }

  function renderRules() {
    const rows = ruleRows();
    const table = el("table", { class: "plain", id: "rules" },
      el("thead", {}, el("tr", {}, el("th", {}, "code"), el("th", {}, "rule"),
        el("th", { class: "num" }, DATA.fixed_label), el("th", { class: "num" }, "manual"),
        el("th", { class: "num" }, "info"))),
      el("tbody", {}, rows.map((row) => el("tr", {
        class: "clickable", title: "Show the files with this rule's findings",
        onclick: () => setFilter({ code: row.code }),
      },
      el("td", {}, codeButton(row.code)),
      el("td", {}, DATA.rules[row.code] ? DATA.rules[row.code].name : ""),
      SEVERITIES.map((severity) => el("td", { class: `num ${severity}` }, row.counts[severity] || 0))))));
    const legend = el("div", { class: "legend" }, SEVERITIES.map((severity) =>
      el("span", {}, el("span", { class: "swatch", style: `background: var(--${severity})` }), severityLabel(severity))));
    return el("div", {}, el("h2", {}, "By rule"),
      rows.length ? [legend, renderChart(rows), table] : el("div", { class: "empty" }, "No findings."));
  }

  function renderFolders() {
    const byFolder = new Map();
    for (const item of files) {
      const entry = byFolder.get(item.folder) || { folder: item.folder, files: 0, changed: 0, fixed: 0, manual: 0, info: 0 };
      entry.files += 1;
      if (item.file.status === "changed") entry.changed += 1;
      for (const severity of SEVERITIES) entry[severity] += item.counts[severity];
      byFolder.set(item.folder, entry);
    }
    const rows = [...byFolder.values()].sort((a, b) =>
      (b.manual + b.info + b.fixed) - (a.manual + a.info + a.fixed) || a.folder.localeCompare(b.folder));
    const body = el("tbody");
    function fill(limit) {
      body.replaceChildren(...rows.slice(0, limit).map((row) => el("tr", {
        class: "clickable", title: "Show the files of this folder",
        onclick: () => setFilter({ folder: row.folder }),
      }, el("td", { class: "mono" }, row.folder), el("td", { class: "num" }, row.files),
      el("td", { class: "num" }, row.changed),
      SEVERITIES.map((severity) => el("td", { class: `num ${severity}` }, row[severity])))));
    }
    fill(FOLDERS_SHOWN);
    const more = rows.length > FOLDERS_SHOWN
      ? el("button", { type: "button", onclick: (event) => { fill(rows.length); event.target.remove(); } },
        `Show all ${rows.length} folders`)
      : null;
    return el("div", {}, el("h2", {}, "By folder"),
      el("table", { class: "plain", id: "folders" },
        el("thead", {}, el("tr", {}, el("th", {}, "folder"), el("th", { class: "num" }, "files"),
          el("th", { class: "num" }, "changed"), el("th", { class: "num" }, DATA.fixed_label),
          el("th", { class: "num" }, "manual"), el("th", { class: "num" }, "info"))),
        body),
      more);
  }

  // -- the file table -------------------------------------------------------------------------------

  const state = { text: "", code: "", kind: "", folder: "", sort: "path", descending: false, selected: -1 };
  let shown = files;
  const search = el("input", { type: "search", id: "filter-text", placeholder: "Filter by path", "aria-label": "Filter by path" });
  const codeSelect = el("select", { id: "filter-code", "aria-label": "Rule" },
    el("option", { value: "" }, "every rule"),
    Object.keys(DATA.summary.rules).sort().map((code) => el("option", { value: code }, code)));
  const kindSelect = el("select", { id: "filter-kind", "aria-label": "Kind" },
    el("option", { value: "" }, "every file"),
    el("option", { value: "changed" }, "changed"),
    el("option", { value: "manual" }, "with manual findings"),
    el("option", { value: "info" }, "with info findings"),
    el("option", { value: "error" }, "errors"),
    el("option", { value: "skipped" }, "skipped"));
  const countNote = el("span", { class: "filter-note", id: "file-count" });
  const folderNote = el("span", { class: "filter-note" });
  const list = el("div", { class: "vlist", id: "file-list", tabindex: "0" });
  const spacer = el("div", { class: "vspacer" });
  list.append(spacer);
  const columns = [
    ["path", "file", ""], ["status", "status", ""], ["fixed", DATA.fixed_label, "num"],
    ["manual", "manual", "num"], ["info", "info", "num"], ["error", "errors", "num"],
  ];
  const head = el("div", { class: "vhead", role: "row" }, columns.map(([key, label, kind]) =>
    el("div", { class: kind, role: "columnheader", "data-sort": key, onclick: () => sortBy(key) }, label)));
  const detail = el("section", { id: "detail" });

  search.addEventListener("input", () => { state.text = search.value.toLowerCase(); apply(); });
  codeSelect.addEventListener("change", () => { state.code = codeSelect.value; apply(); });
  kindSelect.addEventListener("change", () => { state.kind = kindSelect.value; apply(); });
  list.addEventListener("scroll", () => requestAnimationFrame(drawRows));
  window.addEventListener("resize", () => requestAnimationFrame(drawRows));

  function setFilter(change) {
    if (change.code !== undefined) { state.code = change.code; codeSelect.value = change.code; }
    if (change.folder !== undefined) state.folder = change.folder;
    apply();
    document.getElementById("files").scrollIntoView({ behavior: "smooth" });
  }

  function matches(item) {
    if (state.text && !item.lower.includes(state.text)) return false;
    if (state.code && !item.codes.has(state.code)) return false;
    if (state.folder && item.folder !== state.folder && !item.folder.startsWith(state.folder + "/")) return false;
    switch (state.kind) {
      case "": return true;
      case "changed": return item.file.status === "changed";
      case "error": return item.file.status === "error";
      case "skipped": return item.file.status === "skipped";
      default: return item.counts[state.kind] > 0;
    }
  }

  function sortKey(item) {
    switch (state.sort) {
      case "path": return item.file.path;
      case "status": return item.file.status;
      default: return item.counts[state.sort] || 0;
    }
  }

  function sortBy(key) {
    state.descending = state.sort === key ? !state.descending : key !== "path" && key !== "status";
    state.sort = key;
    apply();
  }

  function apply() {
    shown = files.filter(matches);
    const direction = state.descending ? -1 : 1;
    shown.sort((a, b) => {
      const x = sortKey(a), y = sortKey(b);
      const order = typeof x === "number" ? x - y : String(x).localeCompare(String(y));
      return direction * order || a.file.path.localeCompare(b.file.path);
    });
    for (const cell of head.children) {
      cell.setAttribute("aria-sort", cell.dataset.sort === state.sort ? (state.descending ? "descending" : "ascending") : "none");
    }
    countNote.textContent = `${shown.length} of ${files.length} files`;
    folderNote.replaceChildren(...(state.folder
      ? ["folder ", el("code", {}, state.folder), " ",
        el("button", { type: "button", onclick: () => { state.folder = ""; apply(); } }, "clear")]
      : []));
    spacer.style.height = `${shown.length * ROW_HEIGHT}px`;
    list.style.height = `${Math.min(LIST_HEIGHT, Math.max(3, shown.length) * ROW_HEIGHT + 2)}px`;
    list.scrollTop = 0;
    drawRows();
  }

  function drawRows() {
    const first = Math.max(0, Math.floor(list.scrollTop / ROW_HEIGHT) - 5);
    const last = Math.min(shown.length, Math.ceil((list.scrollTop + list.clientHeight) / ROW_HEIGHT) + 5);
    const rows = [];
    for (let position = first; position < last; position += 1) {
      const item = shown[position];
      rows.push(el("div", {
        class: item.index === state.selected ? "vrow selected" : "vrow",
        role: "row",
        style: `top: ${position * ROW_HEIGHT}px`,
        "data-path": item.file.path,
        onclick: () => openFile(item.index),
      },
      el("div", { class: "mono", title: item.file.path }, item.file.path),
      el("div", { class: item.file.status === "changed" ? "fixed" : item.file.status }, item.file.status),
      el("div", { class: "num fixed" }, item.counts.fixed || ""),
      el("div", { class: "num manual" }, item.counts.manual || ""),
      el("div", { class: "num info" }, item.counts.info || ""),
      el("div", { class: "num error" }, item.counts.error || "")));
    }
    spacer.replaceChildren(...rows);
    if (!shown.length) spacer.append(el("div", { class: "empty" }, "No file matches the filters."));
  }

  function renderFiles() {
    return el("div", { id: "files" }, el("h2", {}, "Files"),
      el("div", { class: "controls" }, search, codeSelect, kindSelect, countNote, folderNote),
      el("div", { class: "vtable" }, head, list), detail);
  }

  // -- one file ---------------------------------------------------------------------------------------

  function openFile(index) {
    state.selected = index;
    drawRows();
    const file = DATA.files[index];
    const counts = files[index].counts;
    const header = el("div", { class: "detail-head" }, el("h3", {}, file.path),
      el("span", { class: file.status === "changed" ? "fixed" : file.status }, file.status),
      el("span", { class: "muted" }, SEVERITIES.filter((s) => counts[s]).map((s) => `${counts[s]} ${severityLabel(s)}`).join(", ")));
    const parts = [header];
    if (file.reason) parts.push(el("p", { class: "muted" }, file.reason));
    parts.push(el("ul", { class: "findings" }, file.diagnostics.map((row, key) => el("li", {
      title: "Show it in the diff",
      onclick: () => {
        const target = detail.querySelector(`tr.finding[data-key="${key}"]`);
        if (target) target.scrollIntoView({ block: "center" });
      },
    },
      el("span", { class: "where" }, (row[0] ? `cell ${row[0]}:` : "") + `${row[1]}:${row[2]}`),
      row[4] === "error" ? el("span", { class: "mono" }, row[3]) : codeButton(row[3]),
      el("span", { class: `sev ${row[4]}` }, severityLabel(row[4])),
      row[5]))));
    for (const section of file.view) parts.push(renderSection(file, section));
    if (!file.view.length && file.status !== "error" && file.status !== "skipped") {
      parts.push(el("p", { class: "muted" }, "No source lines to show."));
    }
    detail.replaceChildren(...parts);
    if (location.hash !== `#file=${encodeURIComponent(file.path)}`) {
      history.replaceState(null, "", `#file=${encodeURIComponent(file.path)}`);
    }
    detail.scrollIntoView({ block: "start" });
  }

  function lineCell(number, text, kind) {
    return [el("td", { class: "no" }, number === null ? "" : number),
      el("td", { class: kind }, text === null ? "" : text)];
  }

  function renderSection(file, section) {
    const findings = new Map();
    file.diagnostics.forEach((row, key) => {
      if (row[4] === "error" || (row[0] || null) !== (section.cell || null)) return;
      if (!findings.has(row[1])) findings.set(row[1], []);
      findings.get(row[1]).push([key, row]);
    });
    const body = el("tbody");
    const table = el("table", { class: "diff" },
      el("colgroup", {}, el("col", { class: "no" }), el("col"), el("col", { class: "no" }), el("col")),
      body);
    section.chunks.forEach((chunk, chunkIndex) => {
      if (chunkIndex > 0 || chunk[0] > 1) body.append(el("tr", { class: "gap" }, el("td", { colspan: 4 }, "\u22EF")));
      let oldNo = chunk[0], newNo = chunk[1];
      const rows = chunk[2];
      let index = 0;
      while (index < rows.length) {
        const tag = rows[index][0];
        if (tag === " ") {
          const text = rows[index].slice(1);
          body.append(el("tr", { "data-old": oldNo }, lineCell(oldNo, text, ""), lineCell(newNo, text, "")));
          appendFindings(body, findings, oldNo);
          oldNo += 1; newNo += 1; index += 1;
          continue;
        }
        const removed = [], added = [];
        while (index < rows.length && rows[index][0] === "-") removed.push(rows[index++].slice(1));
        while (index < rows.length && rows[index][0] === "+") added.push(rows[index++].slice(1));
        for (let k = 0; k < Math.max(removed.length, added.length); k += 1) {
          const left = k < removed.length ? lineCell(oldNo + k, removed[k], "del") : lineCell(null, null, "none");
          const right = k < added.length ? lineCell(newNo + k, added[k], "add") : lineCell(null, null, "none");
          body.append(el("tr", k < removed.length ? { "data-old": oldNo + k } : {}, left, right));
          if (k < removed.length) appendFindings(body, findings, oldNo + k);
        }
        oldNo += removed.length; newNo += added.length;
      }
    });
    const title = section.cell ? `cell ${section.cell}` : null;
    return el("div", { class: "section" }, title ? el("div", { class: "section-title" }, title) : null, table);
  }

  function appendFindings(body, findings, line) {
    for (const [key, row] of findings.get(line) || []) {
      body.append(el("tr", { class: `finding ${row[4]}`, "data-key": key }, el("td", { colspan: 4, class: row[4] },
        codeButton(row[3]), el("span", { class: `sev ${row[4]}` }, severityLabel(row[4])),
        `${row[0] ? `cell ${row[0]}, ` : ""}line ${row[1]}, column ${row[2]}: `, row[5])));
    }
  }

  // -- start ------------------------------------------------------------------------------------------

  renderHeader();
  app.append(el("div", { class: "grid2" }, renderRules(), renderFolders()), renderFiles(), dialog);
  apply();
  const wanted = /^#file=(.*)$/.exec(location.hash);
  if (wanted) {
    const path = decodeURIComponent(wanted[1]);
    const found = DATA.files.findIndex((file) => file.path === path);
    if (found >= 0) openFile(found);
  }
})();
