package ui

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// TensorBoard reads event files: TFRecords (length, masked CRC32C of the
// length, data, masked CRC32C of the data) each holding a tensorflow.Event
// proto. The few fields written here are encoded by hand with protowire, so
// frognano needs no TensorFlow protos:
//
//	Event         { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//	Summary       { repeated Value value = 1; }
//	Summary.Value { string tag = 1; float simple_value = 2; }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maskedCRC is TFRecord's masked CRC32C.
func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// appendRecord frames data as one TFRecord.
func appendRecord(out, data []byte) []byte {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(data)))
	out = append(out, n[:]...)
	out = binary.LittleEndian.AppendUint32(out, maskedCRC(n[:]))
	out = append(out, data...)
	return binary.LittleEndian.AppendUint32(out, maskedCRC(data))
}

// scalar is one tagged value of a summary.
type scalar struct {
	Tag   string
	Value float32
}

// eventBytes encodes an Event with a file version or a summary of scalars.
func eventBytes(wallTime float64, step int64, fileVersion string, scalars []scalar) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, math.Float64bits(wallTime))
	if step != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(step))
	}
	if fileVersion != "" {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, fileVersion)
	}
	if len(scalars) > 0 {
		var summary []byte
		for _, s := range scalars {
			var v []byte
			v = protowire.AppendTag(v, 1, protowire.BytesType)
			v = protowire.AppendString(v, s.Tag)
			v = protowire.AppendTag(v, 2, protowire.Fixed32Type)
			v = protowire.AppendFixed32(v, math.Float32bits(s.Value))
			summary = protowire.AppendTag(summary, 1, protowire.BytesType)
			summary = protowire.AppendBytes(summary, v)
		}
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendBytes(b, summary)
	}
	return b
}

// pointScalars are the values TensorBoard plots for one curve point:
// train/<metric> for each metric, held_out/<level> with its interval under
// held_out_low/ and held_out_high/, and run/policy_version, run/wall_seconds,
// run/cpu_seconds. Metrics that are not finite are left out.
func pointScalars(p *records.RunPoint) []scalar {
	out := []scalar{
		{"run/policy_version", float32(p.GetPolicyVersion())},
		{"run/wall_seconds", float32(p.GetWallSeconds())},
		{"run/cpu_seconds", float32(p.GetCpuSeconds())},
	}
	for _, k := range slices.Sorted(maps.Keys(p.GetMetrics())) {
		if v := p.GetMetrics()[k]; finite(v) {
			out = append(out, scalar{"train/" + k, float32(v)})
		}
	}
	for _, h := range p.GetHeldOut() {
		name := heldOutName(h.GetHintLevel())
		out = append(out, scalar{"held_out/" + name, float32(h.GetPass1())},
			scalar{"held_out_low/" + name, float32(h.GetPass1Low())},
			scalar{"held_out_high/" + name, float32(h.GetPass1High())})
	}
	return out
}

// TensorBoardFile is the name of a run's event file: fixed by the run's
// start, so exporting again replaces the file instead of adding a second
// one that TensorBoard would read as well.
func TensorBoardFile(run *records.Run) string {
	return fmt.Sprintf("events.out.tfevents.%d.frognano-%s", run.GetStartedUnixNano()/int64(time.Second), safeFileName(run.GetId()))
}

// fileVersion is the first event of every event file.
const fileVersion = "brain.Event:2"

// stepTag is one scalar of an event file: a tag at a step.
type stepTag struct {
	step int64
	tag  string
}

// appendCurve appends to buf the events of run's curve that written lacks
// and counts them into written: for each point, in curve order, one event
// with the point's scalars whose (step, tag) the file does not hold yet.
// Points earlier in the curve claim the file's scalars first, so two
// points at one step (the start and the warm start; a run's last step and
// its end) are told apart by their order, and a point rewritten since it
// was written (a step whose held-out scores filled in) adds only its new
// scalars. With written empty it is the whole curve, one event per point.
func appendCurve(buf []byte, run *records.Run, written map[stepTag]int) ([]byte, int) {
	start := float64(run.GetStartedUnixNano()) / 1e9
	claimed := map[stepTag]int{}
	events := 0
	for _, p := range run.GetCurve() {
		var fresh []scalar
		for _, sc := range pointScalars(p) {
			k := stepTag{p.GetStep(), sc.Tag}
			if claimed[k] < written[k] {
				claimed[k]++
				continue
			}
			fresh = append(fresh, sc)
		}
		if len(fresh) == 0 {
			continue
		}
		for _, sc := range fresh {
			k := stepTag{p.GetStep(), sc.Tag}
			written[k]++
			claimed[k]++
		}
		buf = appendRecord(buf, eventBytes(start+p.GetWallSeconds(), p.GetStep(), "", fresh))
		events++
	}
	return buf, events
}

// WriteTensorBoardEvents writes a run's curve as TensorBoard events: the
// file version, then one event per point at the point's step, timed at the
// run's start plus the point's wall seconds.
func WriteTensorBoardEvents(w io.Writer, run *records.Run) error {
	start := float64(run.GetStartedUnixNano()) / 1e9
	buf := appendRecord(nil, eventBytes(start, 0, fileVersion, nil))
	buf, _ = appendCurve(buf, run, map[stepTag]int{})
	_, err := w.Write(buf)
	return err
}

// readRecords splits an event file into its records' data, checking
// their CRCs, and returns how many bytes of it are whole, valid records:
// a process killed while writing leaves a torn record at the end.
func readRecords(b []byte) (records [][]byte, good int) {
	for len(b) >= 12 {
		n := binary.LittleEndian.Uint64(b)
		if maskedCRC(b[:8]) != binary.LittleEndian.Uint32(b[8:]) || n > uint64(len(b)-16) {
			break
		}
		data := b[12 : 12+n]
		if maskedCRC(data) != binary.LittleEndian.Uint32(b[12+n:]) {
			break
		}
		records = append(records, data)
		good += 16 + int(n)
		b = b[16+n:]
	}
	return records, good
}

// eventScalars reads an Event's step, file version and its summary's tags.
func eventScalars(data []byte) (step int64, version string, tags []string, err error) {
	bad := fmt.Errorf("tensorboard: malformed event")
	for len(data) > 0 {
		num, typ, l := protowire.ConsumeTag(data)
		if l < 0 {
			return 0, "", nil, bad
		}
		data = data[l:]
		switch {
		case num == 2 && typ == protowire.VarintType:
			v, l := protowire.ConsumeVarint(data)
			if l < 0 {
				return 0, "", nil, bad
			}
			step, data = int64(v), data[l:]
		case num == 3 && typ == protowire.BytesType:
			v, l := protowire.ConsumeString(data)
			if l < 0 {
				return 0, "", nil, bad
			}
			version, data = v, data[l:]
		case num == 5 && typ == protowire.BytesType:
			summary, l := protowire.ConsumeBytes(data)
			if l < 0 {
				return 0, "", nil, bad
			}
			data = data[l:]
			for len(summary) > 0 {
				vnum, vtyp, l := protowire.ConsumeTag(summary)
				if l < 0 {
					return 0, "", nil, bad
				}
				summary = summary[l:]
				if vnum != 1 || vtyp != protowire.BytesType {
					l := protowire.ConsumeFieldValue(vnum, vtyp, summary)
					if l < 0 {
						return 0, "", nil, bad
					}
					summary = summary[l:]
					continue
				}
				v, l := protowire.ConsumeBytes(summary)
				if l < 0 {
					return 0, "", nil, bad
				}
				summary = summary[l:]
				for len(v) > 0 {
					fnum, ftyp, l := protowire.ConsumeTag(v)
					if l < 0 {
						return 0, "", nil, bad
					}
					v = v[l:]
					if fnum == 1 && ftyp == protowire.BytesType {
						s, l := protowire.ConsumeString(v)
						if l < 0 {
							return 0, "", nil, bad
						}
						tags, v = append(tags, s), v[l:]
						continue
					}
					l = protowire.ConsumeFieldValue(fnum, ftyp, v)
					if l < 0 {
						return 0, "", nil, bad
					}
					v = v[l:]
				}
			}
		default:
			l := protowire.ConsumeFieldValue(num, typ, data)
			if l < 0 {
				return 0, "", nil, bad
			}
			data = data[l:]
		}
	}
	return step, version, tags, nil
}

// TensorBoardLog appends a run's curve to its event file while the run
// trains (frognano run --tensorboard DIR): the same file, records and
// scalars as WriteTensorBoard, written point by point as they are
// recorded. It reads the file it finds first, so a resumed run appends
// what the file lacks and never writes a scalar twice. Not safe for
// concurrent use.
type TensorBoardLog struct {
	dir, path string
	written   map[stepTag]int
	// info is the file as the last read or append left it: a file
	// replaced since (runs export --format tensorboard) is read again.
	info os.FileInfo
}

// OpenTensorBoardLog opens run's event file in dir (made if missing),
// reading the scalars an earlier process wrote into it; a torn record at
// its end (a process killed while writing) is cut off.
func OpenTensorBoardLog(dir string, run *records.Run) (*TensorBoardLog, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	l := &TensorBoardLog{dir: dir, path: filepath.Join(dir, TensorBoardFile(run))}
	return l, l.load()
}

// Path is the event file's path.
func (l *TensorBoardLog) Path() string { return l.path }

// load reads the file's scalars into written.
func (l *TensorBoardLog) load() error {
	l.written, l.info = map[stepTag]int{}, nil
	b, err := os.ReadFile(l.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	records, good := readRecords(b)
	for _, r := range records {
		step, _, tags, err := eventScalars(r)
		if err != nil {
			return fmt.Errorf("%s: %w", l.path, err)
		}
		for _, tag := range tags {
			l.written[stepTag{step, tag}]++
		}
	}
	if good < len(b) {
		if err := os.Truncate(l.path, int64(good)); err != nil {
			return err
		}
	}
	l.info, err = os.Stat(l.path)
	return err
}

// Append writes the events of run's curve the file lacks and returns how
// many it wrote.
func (l *TensorBoardLog) Append(run *records.Run) (int, error) {
	info, err := os.Stat(l.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		l.written, l.info = map[stepTag]int{}, nil
	case err != nil:
		return 0, err
	case l.info == nil || !os.SameFile(info, l.info) || info.Size() != l.info.Size():
		if err := l.load(); err != nil {
			return 0, err
		}
	}
	var buf []byte
	if l.info == nil || l.info.Size() == 0 {
		buf = appendRecord(buf, eventBytes(float64(run.GetStartedUnixNano())/1e9, 0, fileVersion, nil))
	}
	written := maps.Clone(l.written)
	buf, events := appendCurve(buf, run, written)
	if events == 0 && len(buf) == 0 {
		return 0, nil
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return 0, err
	}
	_, err = f.Write(buf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// What reached the file is read again on the next append.
		l.info = nil
		return 0, err
	}
	l.written = written
	if l.info, err = os.Stat(l.path); err != nil {
		return events, err
	}
	return events, nil
}

// WriteTensorBoard writes a run's event file into dir (made if missing)
// and returns its path; `tensorboard --logdir DIR` then plots the run.
func WriteTensorBoard(dir string, run *records.Run) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, TensorBoardFile(run))
	tmp, err := os.CreateTemp(dir, ".tfevents-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	bw := bufio.NewWriter(tmp)
	if err := WriteTensorBoardEvents(bw, run); err != nil {
		tmp.Close()
		return "", err
	}
	if err := bw.Flush(); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	return path, os.Rename(tmp.Name(), path)
}
