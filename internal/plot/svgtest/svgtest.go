// Package svgtest reads what plot's tests check in an SVG: its size, the paths drawn and the texts
// written.
package svgtest

import (
	"bytes"
	"encoding/xml"
	"errors"
)

// SVG is an image's size, paths and texts, in document order.
type SVG struct {
	Width, Height string
	Paths         []Path
	Texts         []string
}

// Path is one <path>: its outline and its style attribute.
type Path struct{ D, Style string }

// Parse reads an SVG document.
func Parse(data []byte) (SVG, error) {
	var s SVG
	dec := xml.NewDecoder(bytes.NewReader(data))
	inText := false
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		switch e := tok.(type) {
		case xml.StartElement:
			attr := map[string]string{}
			for _, a := range e.Attr {
				attr[a.Name.Local] = a.Value
			}
			switch e.Name.Local {
			case "svg":
				s.Width, s.Height = attr["width"], attr["height"]
			case "path":
				s.Paths = append(s.Paths, Path{D: attr["d"], Style: attr["style"]})
			case "text":
				inText = true
			}
		case xml.CharData:
			if inText {
				s.Texts = append(s.Texts, string(e))
			}
		case xml.EndElement:
			inText = false
		}
	}
	if s.Width == "" {
		return s, errors.New("no <svg> element with a width")
	}
	return s, nil
}
