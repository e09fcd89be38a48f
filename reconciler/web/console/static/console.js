// The web console's only script: live parts of pages that read fine without it.
// - [data-live] tables and charts are fetched again every few seconds and swapped in;
// - the log (#log) is followed by byte offset and filtered by #log-search (text only:
//   log bytes are set as textContent, never as HTML);
// - [data-copy] buttons copy the text of the element they name.
"use strict";

function refresh(element, every) {
  const url = element.dataset.live;
  const tick = async () => {
    try {
      const answer = await fetch(url, { credentials: "same-origin" });
      if (answer.ok) element.innerHTML = await answer.text();
    } catch (error) { /* the next tick tries again */ }
  };
  setInterval(tick, every);
  tick();
}

function followLog(log) {
  const follow = document.getElementById("log-follow");
  const search = document.getElementById("log-search");
  let offset = Number(log.dataset.offset || 0);
  let text = log.textContent;
  let finished = log.dataset.finished === "true";
  const show = () => {
    const needle = search ? search.value : "";
    log.textContent = needle ? text.split("\n").filter((line) => line.includes(needle)).join("\n") : text;
    if (follow && follow.checked) log.scrollTop = log.scrollHeight;
  };
  const tick = async () => {
    if (finished || (follow && !follow.checked)) return;
    try {
      const answer = await fetch(`${log.dataset.live}?offset=${offset}`, { credentials: "same-origin" });
      if (!answer.ok) return;
      const chunk = await answer.json();
      if (chunk.text) text += chunk.text;
      offset = chunk.next_offset;
      finished = chunk.finished && !chunk.text;
      log.dataset.offset = String(offset);
      show();
    } catch (error) { /* the next tick tries again */ }
  };
  if (search) search.addEventListener("input", show);
  setInterval(tick, 1000);
  show();
}

document.addEventListener("DOMContentLoaded", () => {
  const table = document.getElementById("runs-table");
  if (table) refresh(table, 5000);
  const charts = document.getElementById("charts");
  if (charts) refresh(charts, 3000);
  const log = document.getElementById("log");
  if (log) followLog(log);
  for (const button of document.querySelectorAll("[data-copy]")) {
    button.addEventListener("click", () => {
      const source = document.getElementById(button.dataset.copy);
      if (source && navigator.clipboard) navigator.clipboard.writeText(source.textContent);
    });
  }
});
