"""The chapters' explorers: widgets.interact for a reader; headless, the controls and the first
view drawn with no Output widget, the route by which nbclient can miss a cell's reply."""

from __future__ import annotations

import ipywidgets as widgets
import pytest

from annotated_transformer.book import explorer


def test_headless_the_view_is_drawn_once_with_the_controls_values_and_no_output_widget(
    monkeypatch,
):
    monkeypatch.setenv(explorer.HEADLESS, "1")
    shown, calls = [], []
    monkeypatch.setattr(explorer, "display", shown.append)

    def no_output_widget(*args, **kwargs):
        raise AssertionError("an Output widget: nbclient would echo its outputs to the kernel")

    monkeypatch.setattr(widgets, "Output", no_output_widget)

    def view(depth=3, mode="post", band=True):
        calls.append((depth, mode, band))
        return "the view"

    result = explorer.interact(
        view, depth=widgets.IntSlider(value=6, min=1, max=12), mode=["pre", "post"], band=True
    )
    assert result is None and calls == [(6, "post", True)]  # the slider's value, the defaults
    (controls, drawn) = shown
    assert isinstance(controls, widgets.VBox) and drawn == "the view"
    assert [c.description for c in controls.children] == ["depth", "mode", "band"]


def test_headless_a_fixed_value_is_passed_and_shows_no_control(monkeypatch):
    """As widgets.interact does with widgets.fixed (chapter 11's explorer fixes two arguments)."""
    monkeypatch.setenv(explorer.HEADLESS, "1")
    shown, calls = [], []
    monkeypatch.setattr(explorer, "display", shown.append)
    explorer.interact(
        lambda width=1, layers=2: calls.append((width, layers)),
        width=widgets.IntSlider(value=4),
        layers=widgets.fixed(6),
    )
    assert calls == [(4, 6)]
    assert [control.description for control in shown[0].children] == ["width"]


@pytest.mark.parametrize("value", ["", "0"])
def test_with_a_reader_it_is_widgets_interact(monkeypatch, value):
    monkeypatch.setenv(explorer.HEADLESS, value)
    assert not explorer.headless()
    calls = []
    explorer.interact(lambda x=1: calls.append(x), x=widgets.IntSlider(value=2))
    assert calls == [2]  # widgets.interact ran it, with the slider's value


def test_a_control_that_cannot_be_made_is_refused_by_name(monkeypatch):
    monkeypatch.setenv(explorer.HEADLESS, "1")
    with pytest.raises(ValueError, match="x=<object object .* a list of options"):
        explorer.interact(lambda x=None: None, x=object())


def test_a_notebook_of_many_headless_views_executes_without_waiting_on_its_replies(monkeypatch):
    """Twelve views of twelve outputs each: under nbclient, through widgets.interact's Output
    widget, such a notebook waited out its execution timeout on most runs here (nbclient#312);
    drawn headless they take no such route."""
    import nbformat
    from nbclient import NotebookClient

    view = (
        "import ipywidgets as widgets\n"
        "import pandas as pd\n"
        "from IPython.display import Markdown, display\n"
        "from annotated_transformer.book.explorer import interact\n"
        "frame = pd.DataFrame({'a': range(40), 'b': range(40)})\n"
        "def view(x=1):\n"
        "    for i in range(6):\n"
        "        display(Markdown(f'**{i}**'))\n"
        "        display(frame)\n"
        "interact(view, x=widgets.Dropdown(options=[1, 2]))"
    )
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(view) for _ in range(12)])
    monkeypatch.setenv(explorer.HEADLESS, "1")  # the kernel inherits this process's environment
    NotebookClient(notebook, timeout=30, kernel_name="python3").execute()
    outputs = [output for cell in notebook.cells for output in cell.outputs]
    assert len(outputs) == 12 * 13  # the controls and twelve outputs in every cell, drawn
