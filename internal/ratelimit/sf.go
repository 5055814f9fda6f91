package ratelimit

import (
	"errors"
	"strconv"
	"strings"
)

// This file reads the List structured field of RFC 9651, which the current
// rate-limit draft's RateLimit and RateLimit-Policy fields are. It keeps
// only what a budget needs: each member's name (a String or Token), and its
// numeric and string parameters. Other bare items (byte sequences, booleans,
// dates, display strings) and inner lists are parsed so that the rest of the
// field still reads, and then dropped. As the RFC asks, a field that does
// not parse is ignored as a whole.

// member is one item of a List with the parameters a budget uses.
type member struct {
	name   string // the item's String or Token value
	params map[string]value
}

// value is a bare item reduced to what a budget reads: a number, or else
// a String or Token.
type value struct {
	num   float64
	isNum bool
	str   string
}

var errSyntax = errors.New("not a structured field list")

// errTooMany is returned for a list of more than maxPolicies members.
var errTooMany = errors.New("structured field list past the bound on members")

// parseList parses s as an RFC 9651 List. Members that are not a String or
// Token item are left out. A list of more than maxPolicies members is
// refused whole.
func parseList(s string) ([]member, error) {
	p := sfParser{s: strings.Trim(s, " ")}
	var out []member
	for n := 0; p.i < len(p.s); n++ {
		if n == maxPolicies {
			return nil, errTooMany
		}
		m, ok, err := p.listMember()
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, m)
		}
		p.skipOWS()
		if p.i == len(p.s) {
			return out, nil
		}
		if p.s[p.i] != ',' {
			return nil, errSyntax
		}
		p.i++
		p.skipOWS()
		if p.i == len(p.s) {
			return nil, errSyntax // a trailing comma
		}
	}
	return out, nil
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) skipSP() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

// listMember parses an item or an inner list; ok is false when it is not
// an item named by a String or Token.
func (p *sfParser) listMember() (m member, ok bool, err error) {
	if p.i < len(p.s) && p.s[p.i] == '(' {
		return member{}, false, p.innerList()
	}
	v, named, err := p.bareItem()
	if err != nil {
		return member{}, false, err
	}
	params, err := p.parameters()
	if err != nil {
		return member{}, false, err
	}
	return member{name: v.str, params: params}, named, nil
}

func (p *sfParser) innerList() error {
	p.i++ // '('
	for p.i < len(p.s) {
		p.skipSP()
		if p.i < len(p.s) && p.s[p.i] == ')' {
			p.i++
			_, err := p.parameters()
			return err
		}
		if _, _, err := p.bareItem(); err != nil {
			return err
		}
		if _, err := p.parameters(); err != nil {
			return err
		}
		if p.i < len(p.s) && p.s[p.i] != ' ' && p.s[p.i] != ')' {
			return errSyntax
		}
	}
	return errSyntax
}

func (p *sfParser) parameters() (map[string]value, error) {
	var params map[string]value
	for p.i < len(p.s) && p.s[p.i] == ';' {
		p.i++
		p.skipSP()
		key, err := p.key()
		if err != nil {
			return nil, err
		}
		v := value{num: 1, isNum: true} // a bare key is Boolean true
		if p.i < len(p.s) && p.s[p.i] == '=' {
			p.i++
			if v, _, err = p.bareItem(); err != nil {
				return nil, err
			}
		}
		if params == nil {
			params = map[string]value{}
		}
		params[key] = v // the last of a repeated key wins
	}
	return params, nil
}

func (p *sfParser) key() (string, error) {
	start := p.i
	if p.i == len(p.s) || !(isLCAlpha(p.s[p.i]) || p.s[p.i] == '*') {
		return "", errSyntax
	}
	for p.i < len(p.s) && (isLCAlpha(p.s[p.i]) || isDigit(p.s[p.i]) || strings.IndexByte("_-.*", p.s[p.i]) >= 0) {
		p.i++
	}
	return p.s[start:p.i], nil
}

// bareItem parses one bare item; named reports a String or Token, whose
// text is in str.
func (p *sfParser) bareItem() (v value, named bool, err error) {
	if p.i == len(p.s) {
		return value{}, false, errSyntax
	}
	switch c := p.s[p.i]; {
	case c == '-' || isDigit(c):
		v, err = p.number()
		return v, false, err
	case c == '"':
		v.str, err = p.quoted()
		return v, err == nil, err
	case isAlpha(c) || c == '*':
		start := p.i
		for p.i < len(p.s) && (isTChar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/') {
			p.i++
		}
		return value{str: p.s[start:p.i]}, true, nil
	case c == ':': // byte sequence
		end := strings.IndexByte(p.s[p.i+1:], ':')
		if end < 0 {
			return value{}, false, errSyntax
		}
		for _, b := range []byte(p.s[p.i+1 : p.i+1+end]) {
			if !(isAlpha(b) || isDigit(b) || b == '+' || b == '/' || b == '=') {
				return value{}, false, errSyntax
			}
		}
		p.i += end + 2
		return value{}, false, nil
	case c == '?': // boolean
		if p.i+1 == len(p.s) || (p.s[p.i+1] != '0' && p.s[p.i+1] != '1') {
			return value{}, false, errSyntax
		}
		p.i += 2
		return value{}, false, nil
	case c == '@': // date
		p.i++
		_, err = p.number()
		return value{}, false, err
	case c == '%': // display string: its text is of no use to a budget
		p.i++
		if p.i == len(p.s) || p.s[p.i] != '"' {
			return value{}, false, errSyntax
		}
		_, err = p.quoted()
		return value{}, false, err
	}
	return value{}, false, errSyntax
}

// number parses an Integer (up to 15 digits) or a Decimal (up to 12
// integer and 3 fraction digits).
func (p *sfParser) number() (value, error) {
	start := p.i
	if p.i < len(p.s) && p.s[p.i] == '-' {
		p.i++
	}
	intStart, dot := p.i, -1
	for p.i < len(p.s) && (isDigit(p.s[p.i]) || p.s[p.i] == '.' && dot < 0) {
		if p.s[p.i] == '.' {
			dot = p.i
		}
		p.i++
	}
	digits := p.i - intStart
	switch {
	case digits == 0 || dot == intStart:
		return value{}, errSyntax
	case dot < 0 && digits > 15:
		return value{}, errSyntax
	case dot >= 0 && (dot-intStart > 12 || p.i-dot-1 < 1 || p.i-dot-1 > 3):
		return value{}, errSyntax
	}
	f, err := strconv.ParseFloat(p.s[start:p.i], 64)
	if err != nil {
		return value{}, errSyntax
	}
	return value{num: f, isNum: true}, nil
}

// quoted parses a String from its opening quote; the display string's
// percent escapes pass through as they are.
func (p *sfParser) quoted() (string, error) {
	p.i++ // '"'
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '"':
			return b.String(), nil
		case c == '\\':
			if p.i == len(p.s) || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
				return "", errSyntax
			}
			b.WriteByte(p.s[p.i])
			p.i++
		case c < 0x20 || c > 0x7e:
			return "", errSyntax
		default:
			b.WriteByte(c)
		}
	}
	return "", errSyntax
}

func isDigit(c byte) bool   { return c >= '0' && c <= '9' }
func isLCAlpha(c byte) bool { return c >= 'a' && c <= 'z' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || c >= 'A' && c <= 'Z' }

// isTChar reports an RFC 9110 token character.
func isTChar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
