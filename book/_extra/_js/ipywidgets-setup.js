// Runs before the ipywidgets HTML manager on every page with widgets (nb_ipywidgets_js in
// _config.yml), to fit the manager to a book that serves it locally and typesets with MathJax 3.
(function () {
  "use strict";

  // The manager's modules (@jupyter-widgets/base, /controls, /html-manager, ...) look for their
  // icon fonts in the folder of the address require.js gives each module, which is relative to
  // the page unless require.js is told where they live: in the manager's dist/ folder, for every
  // module (the longest matching prefix wins). A global `require` object defined before
  // require.js loads is its configuration.
  var dist = new URL("../_vendor/@jupyter-widgets/html-manager/dist", document.currentScript.src)
    .href;
  window.require = {
    paths: {
      "@jupyter-widgets": dist,
      "@jupyter-widgets/html-manager/dist": dist,
    },
  };

  // ipywidgets 8 typesets widget labels with MathJax 2's MathJax.Hub.Queue, which MathJax 3
  // lacks: without this, every labelled widget throws "reading 'Queue'" on pages with math.
  // MathJax is loaded with `defer`, so it exists (on pages with math) by DOMContentLoaded.
  document.addEventListener("DOMContentLoaded", function () {
    var mathjax = window.MathJax;
    if (!mathjax || !mathjax.startup || mathjax.Hub) {
      return;
    }
    mathjax.Hub = {
      Queue: function () {
        Array.prototype.forEach.call(arguments, function (command) {
          if (Array.isArray(command) && command[0] === "Typeset") {
            mathjax.startup.promise.then(function () {
              return mathjax.typesetPromise([command[2]]);
            });
          }
        });
      },
    };
  });
})();
