package fleet

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"slices"
	"strings"
)

// Series is one line of a chart: a label and its points (x ascending).
type Series struct {
	Label string
	X, Y  []float64
}

// Chart is one panel: a title and its lines against the fleet's size.
type Chart struct {
	Title  string
	Series []Series
}

// Plot draws the charts side by side, two a row, and writes a PNG. It
// uses only the standard library: lines, dots and a 5x7 bitmap font.
func Plot(w io.Writer, title string, charts []Chart) error {
	const pw, ph = 520, 380
	cols := 2
	rows := (len(charts) + cols - 1) / cols
	img := image.NewRGBA(image.Rect(0, 0, cols*pw, rows*ph+30))
	fill(img, img.Bounds(), color.RGBA{255, 255, 255, 255})
	text(img, 10, 8, title, 2, color.RGBA{0, 0, 0, 255})
	for i, c := range charts {
		x0, y0 := (i%cols)*pw, 30+(i/cols)*ph
		panel(img, image.Rect(x0, y0, x0+pw, y0+ph), c)
	}
	return png.Encode(w, img)
}

var palette = []color.RGBA{
	{214, 39, 40, 255}, {31, 119, 180, 255}, {44, 160, 44, 255}, {255, 127, 14, 255},
	{148, 103, 189, 255}, {140, 86, 75, 255}, {23, 190, 207, 255}, {127, 127, 127, 255},
}

func panel(img *image.RGBA, r image.Rectangle, c Chart) {
	black := color.RGBA{0, 0, 0, 255}
	grey := color.RGBA{225, 225, 225, 255}
	text(img, r.Min.X+60, r.Min.Y+4, c.Title, 1, black)
	plot := image.Rect(r.Min.X+70, r.Min.Y+22, r.Max.X-20, r.Max.Y-90)
	var xs, ys []float64
	for _, s := range c.Series {
		xs = append(xs, s.X...)
		ys = append(ys, s.Y...)
	}
	if len(xs) == 0 {
		text(img, plot.Min.X+10, plot.Min.Y+10, "no data", 1, black)
		return
	}
	// x: log scale over the fleet sizes measured; y: linear from 0.
	xmin, xmax := slices.Min(xs), slices.Max(xs)
	if xmax <= xmin {
		xmax = xmin * 2
	}
	ymax := niceCeil(slices.Max(ys))
	px := func(x float64) int {
		return plot.Min.X + int(float64(plot.Dx())*math.Log(x/xmin)/math.Log(xmax/xmin))
	}
	py := func(y float64) int { return plot.Max.Y - int(float64(plot.Dy())*y/ymax) }
	for k := 0; k <= 4; k++ {
		y := ymax * float64(k) / 4
		hline(img, plot.Min.X, plot.Max.X, py(y), grey)
		lbl := short(y)
		text(img, plot.Min.X-6-6*len(lbl), py(y)-3, lbl, 1, black)
	}
	ticks := slices.Compact(slices.Sorted(slices.Values(xs)))
	for _, x := range ticks {
		vline(img, px(x), plot.Min.Y, plot.Max.Y, grey)
		lbl := short(x)
		text(img, px(x)-3*len(lbl), plot.Max.Y+6, lbl, 1, black)
	}
	text(img, plot.Min.X+plot.Dx()/2-20, plot.Max.Y+18, "nodes", 1, black)
	hline(img, plot.Min.X, plot.Max.X, plot.Max.Y, black)
	vline(img, plot.Min.X, plot.Min.Y, plot.Max.Y, black)
	for i, s := range c.Series {
		col := palette[i%len(palette)]
		for j := range s.X {
			x, y := px(s.X[j]), py(s.Y[j])
			fill(img, image.Rect(x-2, y-2, x+3, y+3), col)
			if j > 0 {
				line(img, px(s.X[j-1]), py(s.Y[j-1]), x, y, col)
			}
		}
		// The legend, under the axis.
		lx, ly := r.Min.X+10+(i%3)*170, plot.Max.Y+32+(i/3)*11
		fill(img, image.Rect(lx, ly, lx+10, ly+6), col)
		text(img, lx+14, ly, s.Label, 1, black)
	}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// short formats v in at most a few characters: 1.5k, 20M, 0.25.
func short(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e9:
		return trim(v/1e9) + "G"
	case a >= 1e6:
		return trim(v/1e6) + "M"
	case a >= 1e3:
		return trim(v/1e3) + "k"
	default:
		return trim(v)
	}
}

func trim(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

func hline(img *image.RGBA, x0, x1, y int, c color.RGBA) {
	fill(img, image.Rect(x0, y, x1+1, y+1), c)
}

func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA) {
	fill(img, image.Rect(x, y0, x+1, y1+1), c)
}

// line draws a two-pixel line from (x0,y0) to (x1,y1).
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	steps := max(abs(x1-x0), abs(y1-y0), 1)
	for i := 0; i <= steps; i++ {
		x := x0 + (x1-x0)*i/steps
		y := y0 + (y1-y0)*i/steps
		fill(img, image.Rect(x, y, x+2, y+2), c)
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// text writes s at (x, y) in the 5x7 font, scaled; lower case is drawn
// as upper case, and unknown characters as blanks.
func text(img *image.RGBA, x, y int, s string, scale int, c color.RGBA) {
	for _, ch := range strings.ToUpper(s) {
		g := font[ch]
		for row := 0; row < 7; row++ {
			for col := 0; col < len(g[row]); col++ {
				if g[row][col] == '#' {
					fill(img, image.Rect(x+col*scale, y+row*scale, x+(col+1)*scale, y+(row+1)*scale), c)
				}
			}
		}
		x += 6 * scale
	}
}

// font is a 5x7 bitmap font of what the charts write.
var font = map[rune][7]string{
	'0': {" ### ", "#   #", "#  ##", "# # #", "##  #", "#   #", " ### "},
	'1': {"  #  ", " ##  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "},
	'2': {" ### ", "#   #", "    #", "   # ", "  #  ", " #   ", "#####"},
	'3': {"#####", "   # ", "  #  ", "   # ", "    #", "#   #", " ### "},
	'4': {"   # ", "  ## ", " # # ", "#  # ", "#####", "   # ", "   # "},
	'5': {"#####", "#    ", "#### ", "    #", "    #", "#   #", " ### "},
	'6': {"  ## ", " #   ", "#    ", "#### ", "#   #", "#   #", " ### "},
	'7': {"#####", "    #", "   # ", "  #  ", " #   ", " #   ", " #   "},
	'8': {" ### ", "#   #", "#   #", " ### ", "#   #", "#   #", " ### "},
	'9': {" ### ", "#   #", "#   #", " ####", "    #", "   # ", " ##  "},
	'A': {" ### ", "#   #", "#   #", "#####", "#   #", "#   #", "#   #"},
	'B': {"#### ", "#   #", "#   #", "#### ", "#   #", "#   #", "#### "},
	'C': {" ### ", "#   #", "#    ", "#    ", "#    ", "#   #", " ### "},
	'D': {"#### ", "#   #", "#   #", "#   #", "#   #", "#   #", "#### "},
	'E': {"#####", "#    ", "#    ", "#### ", "#    ", "#    ", "#####"},
	'F': {"#####", "#    ", "#    ", "#### ", "#    ", "#    ", "#    "},
	'G': {" ### ", "#   #", "#    ", "# ###", "#   #", "#   #", " ####"},
	'H': {"#   #", "#   #", "#   #", "#####", "#   #", "#   #", "#   #"},
	'I': {" ### ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "},
	'J': {"  ###", "   # ", "   # ", "   # ", "   # ", "#  # ", " ##  "},
	'K': {"#   #", "#  # ", "# #  ", "##   ", "# #  ", "#  # ", "#   #"},
	'L': {"#    ", "#    ", "#    ", "#    ", "#    ", "#    ", "#####"},
	'M': {"#   #", "## ##", "# # #", "# # #", "#   #", "#   #", "#   #"},
	'N': {"#   #", "#   #", "##  #", "# # #", "#  ##", "#   #", "#   #"},
	'O': {" ### ", "#   #", "#   #", "#   #", "#   #", "#   #", " ### "},
	'P': {"#### ", "#   #", "#   #", "#### ", "#    ", "#    ", "#    "},
	'Q': {" ### ", "#   #", "#   #", "#   #", "# # #", "#  # ", " ## #"},
	'R': {"#### ", "#   #", "#   #", "#### ", "# #  ", "#  # ", "#   #"},
	'S': {" ####", "#    ", "#    ", " ### ", "    #", "    #", "#### "},
	'T': {"#####", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  "},
	'U': {"#   #", "#   #", "#   #", "#   #", "#   #", "#   #", " ### "},
	'V': {"#   #", "#   #", "#   #", "#   #", "#   #", " # # ", "  #  "},
	'W': {"#   #", "#   #", "#   #", "# # #", "# # #", "# # #", " # # "},
	'X': {"#   #", "#   #", " # # ", "  #  ", " # # ", "#   #", "#   #"},
	'Y': {"#   #", "#   #", " # # ", "  #  ", "  #  ", "  #  ", "  #  "},
	'Z': {"#####", "    #", "   # ", "  #  ", " #   ", "#    ", "#####"},
	'.': {"     ", "     ", "     ", "     ", "     ", " ##  ", " ##  "},
	',': {"     ", "     ", "     ", "     ", " ##  ", "  #  ", " #   "},
	'-': {"     ", "     ", "     ", "#####", "     ", "     ", "     "},
	'/': {"     ", "    #", "   # ", "  #  ", " #   ", "#    ", "     "},
	'(': {"   # ", "  #  ", " #   ", " #   ", " #   ", "  #  ", "   # "},
	')': {" #   ", "  #  ", "   # ", "   # ", "   # ", "  #  ", " #   "},
	':': {"     ", " ##  ", " ##  ", "     ", " ##  ", " ##  ", "     "},
	'%': {"##   ", "##  #", "   # ", "  #  ", " #   ", "#  ##", "   ##"},
	'=': {"     ", "     ", "#####", "     ", "#####", "     ", "     "},
	'+': {"     ", "  #  ", "  #  ", "#####", "  #  ", "  #  ", "     "},
	'|': {"  #  ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  "},
}
