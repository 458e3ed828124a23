// The op catalog's filter (reference/ops.md): keep the rows that contain every word typed, case-insensitive.
(function () {
  function setup() {
    var input = document.getElementById("catalog-filter");
    var table = document.getElementById("catalog-table");
    if (!input || !table || input.dataset.ready) return;
    input.dataset.ready = "1";
    var rows = Array.prototype.slice.call(table.tBodies[0].rows);
    var texts = rows.map(function (r) { return r.textContent.toLowerCase(); });
    var count = document.getElementById("catalog-count");
    function apply() {
      var words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
      var shown = 0;
      rows.forEach(function (row, i) {
        var keep = words.every(function (w) { return texts[i].indexOf(w) !== -1; });
        row.hidden = !keep;
        if (keep) shown += 1;
      });
      count.textContent = shown + " of " + rows.length + " ops";
    }
    input.addEventListener("input", apply);
    var q = new URLSearchParams(window.location.search).get("op");
    if (q) { input.value = q; }
    apply();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", setup);
  else setup();
})();
