// Runs before the ipywidgets HTML manager on every page with widgets (nb_ipywidgets_js in
// _config.yml), to fit the manager to a book that serves it locally and typesets with MathJax 3.
(function () {
  "use strict";

  // The manager's modules look for their icon fonts beside the address require.js gives them,
  // which is relative to the page unless require.js is told where they live. A global `require`
  // object defined before require.js loads is its configuration.
  window.require = {
    paths: {
      "@jupyter-widgets": new URL("../_vendor/@jupyter-widgets", document.currentScript.src).href,
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
