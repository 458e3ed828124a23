// gradserve's addition to Swagger UI (/docs): an image/svg+xml response (GET .../graph/svg) is shown as a
// picture above its source, where Swagger UI shows the source only. The picture is an <img> of a data: URL,
// so nothing in the SVG runs. Loaded after swagger-ui-bundle.js and before the page's set-up script: it
// wraps SwaggerUIBundle so that the set-up gets this plugin beside its own options.
(function () {
  "use strict";
  var original = window.SwaggerUIBundle;
  if (typeof original !== "function") {
    return;
  }

  function dataUrl(svg) {
    var bytes = new TextEncoder().encode(svg);
    var binary = "";
    for (var i = 0; i < bytes.length; i += 0x8000) {
      binary += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
    }
    return "data:image/svg+xml;base64," + window.btoa(binary);
  }

  function SvgPicture(system) {
    var React = system.React;
    return {
      wrapComponents: {
        responseBody: function (Original) {
          return function (props) {
            var type = String(props.contentType || "");
            var source = React.createElement(Original, props);
            if (!/^image\/svg\+xml/i.test(type) || typeof props.content !== "string" || !props.content) {
              return source;
            }
            var picture = React.createElement("img", {
              className: "gradserve-svg-picture", src: dataUrl(props.content), alt: "The response, drawn",
              style: {maxWidth: "100%", background: "#fff", border: "1px solid #ddd", margin: "0.5em 0"}
            });
            return React.createElement("div", {className: "gradserve-svg-response"}, picture, source);
          };
        }
      }
    };
  }

  var wrapped = function (options) {
    var plugins = (options && options.plugins) || [];
    return original(Object.assign({}, options, {plugins: plugins.concat([SvgPicture])}));
  };
  Object.assign(wrapped, original);  // presets, plugins and the rest that the set-up script reads from it
  window.SwaggerUIBundle = wrapped;
})();
