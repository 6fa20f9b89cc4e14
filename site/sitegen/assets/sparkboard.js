/* sparkboard: draw every chart of the page with the vendored vega-embed.
 * A chart is <figure class="sb-chart"><div class="sb-chart-view"></div>
 * <script type="application/json">SPEC</script></figure>; the spec is inline so pages work
 * from a local folder (file://), where fetching a JSON file is not allowed.
 * Charts are redrawn with the dark theme when Material's palette switches to slate. */
(function () {
  "use strict";

  function isDark() {
    return document.body.getAttribute("data-md-color-scheme") === "slate";
  }

  // The colour of main's series (charts.MAIN_COLOUR), lightened on the dark palette.
  var MAIN_LIGHT = "#343a40";
  var MAIN_DARK = "#e9ecef";

  function draw(fig) {
    var view = fig.querySelector(".sb-chart-view");
    var source = fig.querySelector('script[type="application/json"]');
    if (!view || !source || typeof window.vegaEmbed !== "function") {
      return;
    }
    var spec;
    try {
      var body = source.textContent;
      if (isDark()) {
        body = body.split('"' + MAIN_LIGHT + '"').join('"' + MAIN_DARK + '"');
      }
      spec = JSON.parse(body);
    } catch (err) {
      fig.setAttribute("data-sb-error", "unreadable chart spec");
      return;
    }
    if (fig._sbResult) {
      fig._sbResult.finalize();
      fig._sbResult = null;
    }
    var options = { actions: false, renderer: "svg", mode: "vega-lite" };
    if (isDark()) {
      options.theme = "dark";
      options.config = { background: "transparent" };
    }
    window.vegaEmbed(view, spec, options).then(
      function (result) {
        fig._sbResult = result;
        fig.setAttribute("data-sb-rendered", isDark() ? "dark" : "light");
      },
      function (err) {
        fig.setAttribute("data-sb-error", String(err));
        console.error("sparkboard chart:", err);
      }
    );
  }

  function drawAll() {
    var figs = document.querySelectorAll("figure.sb-chart");
    for (var i = 0; i < figs.length; i++) {
      draw(figs[i]);
    }
  }

  // Find a PR (find.html): filter the local index (assets/find-index.js sets SB_FIND). Text
  // goes in through textContent only: titles and authors are hostile.
  function find() {
    var input = document.getElementById("sb-find-input");
    var list = document.getElementById("sb-find-results");
    if (!input || !list || !window.SB_FIND) {
      return;
    }
    function show() {
      var words = input.value.toLowerCase().replace(/#/g, "").split(/\s+/).filter(Boolean);
      list.textContent = "";
      if (!words.length) {
        return;
      }
      var shown = 0;
      for (var i = 0; i < window.SB_FIND.length && shown < 50; i++) {
        var p = window.SB_FIND[i];
        var hay = (p.pr + " " + p.title + " " + p.author).toLowerCase();
        if (!words.every(function (w) { return hay.indexOf(w) >= 0; })) {
          continue;
        }
        var li = document.createElement("li");
        var a = document.createElement("a");
        a.href = "pr/" + p.pr + ".html";
        a.textContent = "#" + p.pr + " " + p.title;
        li.appendChild(a);
        li.appendChild(document.createTextNode(" — " + p.author + " — " + p.label + " in " + p.round));
        list.appendChild(li);
        shown++;
      }
    }
    input.addEventListener("input", show);
    show();
  }

  function start() {
    find();
    drawAll();
    var last = isDark();
    new MutationObserver(function () {
      if (isDark() !== last) {
        last = isDark();
        drawAll();
      }
    }).observe(document.body, { attributes: true, attributeFilter: ["data-md-color-scheme"] });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
