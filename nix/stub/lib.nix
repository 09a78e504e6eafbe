# A stand-in for the part of nixpkgs' `lib` (and of its module system) that
# nix/module.nix, nix/facts.nix, nix/example-configuration.nix and the
# stand-in nixpkgs modules beside this file use, for evaluation without
# nixpkgs (nix/module-stub-eval.nix, run by scripts/nix-check.sh).
#
# The module system here keeps what decides whether a real evaluation
# fails or what it yields, for the options these modules touch:
# - mkIf, mkMerge, mkOverride (mkDefault, mkForce, option defaults) and
#   mkOrder (mkBefore, mkAfter), pushed down into attribute sets as
#   lib/modules.nix pushDownProperties does, so a condition is evaluated
#   only where its value is needed (no infinite recursion where the real
#   module system has none);
# - declared options: a definition of an option that does not exist in a
#   namespace with declared options fails ("The option `...' does not
#   exist"), a definition of the wrong type fails, two different values of
#   a single-valued option at the same priority conflict, lists
#   concatenate in mkOrder order, an option without a definition or a
#   default fails where it is read;
# - attrsOf containers drop names whose every definition is under a false
#   mkIf (the real attrsOf does), and may derive values for each element
#   (the systemd service defaults of nixos/lib/systemd-lib.nix).
# Everything else (free-form trees such as systemd.services.<name>.*) merges
# the way the real types do for these values: attribute sets key by key,
# lists concatenated, other values equal or conflicting.
let
  inherit (builtins)
    all
    any
    attrNames
    concatMap
    concatStringsSep
    elem
    filter
    foldl'
    head
    isAttrs
    isBool
    isFunction
    isInt
    isList
    isPath
    isString
    length
    listToAttrs
    mapAttrs
    sort
    substring
    stringLength
    tail
    toJSON
    ;

  isType = t: v: isAttrs v && (v._type or null) == t;
  isDerivation = v: isAttrs v && (v.type or null) == "derivation";
  # A plain attribute set: one the module system walks into.
  isPlain = v: isAttrs v && !(v ? _type) && !isDerivation v && !(v ? outPath);

  # --- properties -----------------------------------------------------------

  mkIf = condition: content: {
    _type = "if";
    inherit condition content;
  };
  mkMerge = contents: {
    _type = "merge";
    inherit contents;
  };
  mkOverride = priority: content: {
    _type = "override";
    inherit priority content;
  };
  mkOrder = priority: content: {
    _type = "order";
    inherit priority content;
  };

  # Pushes mkIf, mkMerge and mkOverride into a definition whose content is
  # an attribute set: a list of plain attribute sets whose values carry the
  # properties, or [ d ] for a leaf definition. Conditions are not evaluated.
  pushDown =
    d:
    if isType "merge" d then
      concatMap pushDown d.contents
    else if isType "if" d then
      map (x: if isPlain x then mapAttrs (_: mkIf d.condition) x else mkIf d.condition x) (pushDown d.content)
    else if isType "override" d then
      map (x: if isPlain x then mapAttrs (_: mkOverride d.priority) x else mkOverride d.priority x) (pushDown d.content)
    else
      [ d ];

  # Whether a definition survives its conditions (evaluates them).
  live =
    d:
    if isType "if" d then
      d.condition && live d.content
    else if isType "merge" d then
      any live d.contents
    else if isType "override" d || isType "order" d then
      live d.content
    else
      true;

  # A leaf definition without its properties: [ { value; priority; order; } ]
  # for each live value (mkMerge of leaves gives several).
  unwrap =
    d:
    let
      go =
        p: o: d:
        if isType "if" d then
          (if d.condition then go p o d.content else [ ])
        else if isType "merge" d then
          concatMap (go p o) d.contents
        else if isType "override" d then
          go d.priority o d.content
        else if isType "order" d then
          go p d.priority d.content
        else
          [
            {
              value = d;
              priority = p;
              order = o;
            }
          ];
    in
    go 100 1000 d;

  showPath = path: concatStringsSep "." path;

  # The highest-priority (lowest number) definitions.
  topPriority =
    ds:
    let
      best = foldl' (m: x: if x.priority < m then x.priority else m) 9999 ds;
    in
    filter (x: x.priority == best) ds;

  # Merges leaf definitions of a free-form value (or an untyped option).
  mergeValues =
    path: ds:
    let
      top = topPriority ds;
      vals = map (x: x.value) top;
    in
    if ds == [ ] then
      throw "The option `${showPath path}' is used but not defined."
    else if all isList vals then
      concatMap (x: x.value) (sort (a: b: a.order < b.order) top)
    else if all isPlain vals then
      mergeTree path (map (v: v) vals) null
    else if all (v: v == head vals) vals then
      head vals
    else
      throw "The option `${showPath path}' has conflicting definition values: ${toJSON (map (v: if isFunction v then "<function>" else v) vals)}";

  # --- types ----------------------------------------------------------------

  mkType =
    name: check: extra:
    {
      _type = "option-type";
      inherit name check;
      kind = "single";
    }
    // extra;

  types = rec {
    bool = mkType "boolean" isBool { };
    str = mkType "string" isString { };
    nonEmptyStr = mkType "non-empty string" (v: isString v && v != "") { };
    int = mkType "signed integer" isInt { };
    path = mkType "path" (v: isPath v || (isString v && substring 0 1 v == "/") || (isAttrs v && v ? outPath)) { };
    package = mkType "package" (v: isDerivation v || (isAttrs v && v ? outPath)) { };
    anything = mkType "anything" (_: true) { kind = "free"; };
    attrs = mkType "attribute set" isAttrs { kind = "free"; };
    listOf =
      t:
      mkType "list of ${t.name}" (v: isList v && all t.check v) {
        kind = "list";
        elemType = t;
      };
    nullOr = t: mkType "null or ${t.name}" (v: v == null || t.check v) { kind = if t.kind == "free" then "free" else "single"; };
    enum = l: mkType "one of ${toJSON l}" (v: elem v l) { };
    either =
      a: b:
      mkType "${a.name} or ${b.name}" (v: a.check v || b.check v) {
        kind = if a.kind == "list" || b.kind == "list" then "either-list" else "single";
      };
    attrsOf =
      t:
      mkType "attribute set of ${t.name}" (v: isAttrs v) {
        kind = "attrsOf";
        elemType = t;
      };
    # A submodule: `options` as in a module (declarations only) and, for
    # the stand-ins, `derive` name -> value -> the attributes the real
    # submodule's config part sets (mkDefault'ed values such as a
    # manifest's target).
    submoduleWith =
      {
        options ? { },
        derive ? (_: _: { }),
        freeform ? false,
      }:
      mkType "submodule" isAttrs {
        kind = "submodule";
        inherit options derive freeform;
      };
  };

  # --- declarations and the merge -------------------------------------------

  isOption = isType "option";

  # Merges the definitions `defs` at `path` against the declarations `decl`
  # (an option, a namespace of declarations, or null: free-form).
  mergeTree =
    path: defs: decl:
    if isOption decl then
      mergeOption path decl defs
    else
      let
        pushed = concatMap pushDown defs;
        leaves = filter (x: !(isPlain x)) pushed;
        sets = filter isPlain pushed;
        declared = if isAttrs decl then decl else { };
        # A namespace that declares options itself refuses other names (not
        # the root: the stand-ins declare only a few of NixOS's options).
        strict = path != [ ] && any (n: isOption declared.${n}) (attrNames declared);
        defNames = concatMap attrNames sets;
        unknown = filter (n: !(declared ? ${n})) defNames;
        names = attrNames (listToAttrs (map (n: {
          name = n;
          value = null;
        }) (defNames ++ attrNames declared)));
      in
      if decl == null && leaves != [ ] then
        mergeValues path (concatMap unwrap pushed)
      else if leaves != [ ] then
        throw "The option `${showPath path}' is a set of options, not a value: ${toJSON (map (l: l._type or (builtins.typeOf l)) leaves)}"
      else if strict && unknown != [ ] then
        throw "The option `${showPath (path ++ [ (head unknown) ])}' does not exist."
      else
        listToAttrs (
          map (n: {
            name = n;
            value = mergeTree (path ++ [ n ]) (concatMap (s: if s ? ${n} then [ s.${n} ] else [ ]) sets) (
              declared.${n} or null
            );
          }) names
        );

  mergeOption =
    path: decl: defs:
    let
      t = decl.type or types.anything;
      ds = concatMap unwrap defs ++ (if decl ? default then [ (unwrapDefault decl.default) ] else [ ]);
      unwrapDefault = v: {
        value = v;
        priority = 1500;
        order = 1000;
      };
      top = topPriority ds;
      vals = map (x: x.value) top;
      listed = concatMap (x: x.value) (sort (a: b: a.order < b.order) top);
      merged =
        if t.kind == "attrsOf" then
          let
            sets = concatMap pushDown defs;
          in
          mergeAttrsOf path t (if sets == [ ] && decl ? default then [ decl.default ] else sets)
        else if ds == [ ] then
          throw "The option `${showPath path}' is used but not defined."
        else if t.kind == "list" || (t.kind == "either-list" && all isList vals) then
          listed
        else if t.kind == "submodule" then
          mergeSubmodule path t defs
        else if t.kind == "free" && all isPlain vals then
          mergeTree path vals null
        else if all (v: v == head vals) vals then
          head vals
        else
          throw "The option `${showPath path}' has conflicting definition values: ${toJSON vals}";
      checked =
        if t.kind == "attrsOf" || t.kind == "submodule" || t.check merged then
          merged
        else
          throw "A definition for option `${showPath path}' is not of type `${t.name}': ${toJSON merged}";
    in
    (decl.apply or (v: v)) checked;

  # attrsOf: each name merged on its own (names whose definitions are all
  # under a false mkIf are left out), checked against the element type.
  mergeAttrsOf =
    path: t: sets:
    let
      plain = filter isPlain sets;
      names = attrNames (listToAttrs (map (n: {
        name = n;
        value = null;
      }) (concatMap attrNames plain)));
      defsOf = n: concatMap (s: if s ? ${n} then [ s.${n} ] else [ ]) plain;
      liveNames = filter (n: any live (defsOf n)) names;
      elem = n: mergeElement (path ++ [ n ]) t.elemType n (defsOf n);
    in
    listToAttrs (map (n: {
      name = n;
      value = elem n;
    }) liveNames);

  mergeElement =
    path: t: name: defs:
    if t.kind == "submodule" then
      mergeSubmodule path t defs
    else
      let
        v = mergeOption path {
          type = t;
        } defs;
      in
      v;

  # A submodule value: its declared options merged (defaults and derived
  # values included), unknown names refused.
  mergeSubmodule =
    path: t: defs:
    let
      name = builtins.elemAt path (length path - 1);
      given = mergeTree path defs (if t.freeform then null else t.options);
      derived = t.derive name given;
      # Derived values are definitions at mkDefault priority.
      all' = mergeTree path (defs ++ [ (mapAttrs (_: mkOverride 1000) derived) ]) (
        if t.freeform then null else t.options
      );
    in
    if t.freeform then given // derived else all';

  # Collects the declarations of all modules (the `options` trees).
  mergeDecls = foldl' (acc: o: recursiveUpdateDecl acc o) { };
  recursiveUpdateDecl =
    a: b:
    a
    // mapAttrs (
      n: v: if a ? ${n} && isAttrs v && !(isOption v) && isAttrs a.${n} && !(isOption a.${n}) then recursiveUpdateDecl a.${n} v else v
    ) b;

  # evalModules, enough for these modules: each is a function of
  # { config, lib, pkgs, options, ... } or an attribute set; a module with
  # none of options/config/imports is all config (the shorthand).
  evalModules =
    {
      modules,
      specialArgs ? { },
    }:
    let
      args = specialArgs // {
        inherit config options lib;
      };
      load = m: let r = if isFunction m then m args else if isPath m then load (import m) else m; in r;
      expand =
        m:
        let
          r = load m;
          structured = r ? options || r ? config || r ? imports;
        in
        (if structured then concatMap expand (r.imports or [ ]) else [ ])
        ++ [
          (
            if structured then
              {
                options = r.options or { };
                config = r.config or { };
              }
            else
              {
                options = { };
                config = r;
              }
          )
        ];
      loaded = concatMap expand modules;
      options = mergeDecls (map (m: m.options) loaded);
      config = mergeTree [ ] (map (m: m.config) loaded) options;
    in
    {
      inherit config options;
    };

  # --- the rest of lib that the modules call --------------------------------

  optional = c: v: if c then [ v ] else [ ];
  optionals = c: l: if c then l else [ ];
  optionalAttrs = c: s: if c then s else { };
  optionalString = c: s: if c then s else "";
  getOutput =
    output: pkg: if !(pkg ? outputSpecified) || !pkg.outputSpecified then pkg.${output} or pkg.out or pkg else pkg;
  lib = {
    inherit
      mkIf
      mkMerge
      mkOverride
      mkOrder
      types
      evalModules
      optional
      optionals
      optionalAttrs
      optionalString
      getOutput
      isDerivation
      ;
    inherit (builtins)
      any
      all
      elem
      filter
      concatStringsSep
      attrNames
      mapAttrs
      toJSON
      ;
    mkDefault = mkOverride 1000;
    mkForce = mkOverride 50;
    mkOptionDefault = mkOverride 1500;
    mkBefore = mkOrder 500;
    mkAfter = mkOrder 1500;
    mkOption = o: o // { _type = "option"; };
    mkEnableOption = d: {
      _type = "option";
      type = types.bool;
      default = false;
      description = "Whether to enable ${d}.";
    };
    mkPackageOption = pkgs: name: extra: {
      _type = "option";
      type = types.package;
      default = pkgs.${name};
      description = extra.extraDescription or "The ${name} package to use.";
    };
    literalExpression = e: {
      _type = "literalExpression";
      text = e;
    };
    recursiveUpdate =
      a: b:
      a // mapAttrs (n: v: if a ? ${n} && isAttrs v && isAttrs a.${n} && !(isDerivation v) then lib.recursiveUpdate a.${n} v else v) b;
    getBin = getOutput "bin";
    getLib = getOutput "lib";
    getExe = p: "${getOutput "bin" p}/bin/${p.meta.mainProgram or p.pname or p.name}";
    getExe' = p: x: "${getOutput "bin" p}/bin/${x}";
    getName = p: p.pname or p.name;
    hasPrefix = p: s: substring 0 (stringLength p) s == p;
    hasSuffix =
      x: s:
      let
        n = stringLength s;
        m = stringLength x;
      in
      m <= n && substring (n - m) m s == x;
    hasInfix =
      x: s:
      builtins.match ".*${lib.escapeRegex (builtins.unsafeDiscardStringContext x)}.*" (builtins.unsafeDiscardStringContext s) != null;
    escapeRegex = builtins.replaceStrings (map (c: c) [ "\\" "[" "]" "{" "}" "(" ")" "." "*" "+" "?" "^" "$" "|" ]) (
      map (c: "\\${c}") [ "\\" "[" "]" "{" "}" "(" ")" "." "*" "+" "?" "^" "$" "|" ]
    );
    removePrefix = p: s: if lib.hasPrefix p s then substring (stringLength p) (-1) s else s;
    hasAttrByPath =
      path: set:
      if path == [ ] then true else isAttrs set && set ? ${head path} && lib.hasAttrByPath (tail path) set.${head path};
    attrByPath =
      path: d: set:
      if path == [ ] then set else if isAttrs set && set ? ${head path} then lib.attrByPath (tail path) d set.${head path} else d;
    filterAttrs = f: s: listToAttrs (concatMap (n: if f n s.${n} then [ { name = n; value = s.${n}; } ] else [ ]) (attrNames s));
    mapAttrs' = f: s: listToAttrs (map (n: f n s.${n}) (attrNames s));
    mapAttrsToList = f: s: map (n: f n s.${n}) (attrNames s);
    nameValuePair = name: value: { inherit name value; };
    flatten = l: if isList l then concatMap lib.flatten l else [ l ];
    concatMapStringsSep = sep: f: l: concatStringsSep sep (map f l);
    versionAtLeast = v: m: builtins.compareVersions v m >= 0;
    escapeShellArg = a: "'${builtins.replaceStrings [ "'" ] [ "'\\''" ] (toString a)}'";
    escapeShellArgs = l: concatStringsSep " " (map lib.escapeShellArg l);
    unique = foldl' (acc: x: if elem x acc then acc else acc ++ [ x ]) [ ];
    last = l: builtins.elemAt l (length l - 1);
  };
in
lib
