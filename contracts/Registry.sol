// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {IJobMarket} from "./interfaces/IJobMarket.sol";
import {IRegistry} from "./interfaces/IRegistry.sol";

/// @title Registry
/// @notice Model and dataset names, their owners and their versions, append-only.
/// @dev No admin, no upgrade, no custody: a name's owner is the only party that changes anything
/// about it, and what it changes is only ever added (a version) or handed on (the name). A version,
/// once published, is never edited or removed. The market it reads jobs from is fixed at
/// deployment: a version that names a job was published by that job's user.
contract Registry is IRegistry {
    /// @dev A name's owner and its versions; version n is `versions[n - 1]`.
    struct Record {
        address owner;
        Version[] versions;
    }

    /*//////////////////////////////////////////////////////////////
                               CONSTANTS
    //////////////////////////////////////////////////////////////*/

    /// @notice Longest name in bytes, `org/name` together.
    uint256 public constant MAX_NAME_LENGTH = 96;
    /// @notice Longest CID in bytes: a CIDv1 of a SHA-256 in base32 is 59.
    uint256 public constant MAX_CID_LENGTH = 128;
    /// @notice Longest license id in bytes (the longest SPDX id is under 50).
    uint256 public constant MAX_LICENSE_LENGTH = 64;

    /*//////////////////////////////////////////////////////////////
                                STORAGE
    //////////////////////////////////////////////////////////////*/

    /// @notice The market whose jobs versions name.
    IJobMarket public immutable market;

    mapping(bytes32 key => Record) private _records;
    mapping(Kind kind => string[]) private _names;

    constructor(IJobMarket market_) {
        if (address(market_) == address(0)) revert ZeroAddress();
        market = market_;
    }

    /*//////////////////////////////////////////////////////////////
                                EXTERNAL
    //////////////////////////////////////////////////////////////*/

    /// @inheritdoc IRegistry
    function publish(Kind kind, string calldata name, Publication calldata publication)
        external
        returns (uint32 number)
    {
        if (!_validName(bytes(name))) revert InvalidName(name);
        if (!_validCid(bytes(publication.cid), false)) revert InvalidCid(publication.cid);
        if (!_validCid(bytes(publication.metadataCid), true)) revert InvalidCid(publication.metadataCid);
        if (!_validLicense(bytes(publication.license))) revert InvalidLicense(publication.license);
        _checkParent(kind, publication.parentName, publication.parentVersion);
        if (publication.jobId != 0) _checkJob(publication.jobId);

        Record storage record = _records[_key(kind, name)];
        address owner = record.owner;
        if (owner == address(0)) {
            record.owner = msg.sender;
            _names[kind].push(name);
            emit NameRegistered(kind, keccak256(bytes(name)), name, msg.sender);
        } else if (owner != msg.sender) {
            revert NotNameOwner(name, msg.sender, owner);
        }

        // Written field by field into the new slot: a struct literal of eight fields from calldata
        // does not fit the stack without the IR pipeline.
        Version storage stored = record.versions.push();
        stored.cid = publication.cid;
        stored.license = publication.license;
        stored.metadataCid = publication.metadataCid;
        stored.parentName = publication.parentName;
        stored.parentVersion = publication.parentVersion;
        stored.jobId = publication.jobId;
        stored.publisher = msg.sender;
        stored.publishedAt = uint64(block.timestamp);
        // A name holds fewer than 2^32 versions: each costs a transaction of well over 100k gas.
        number = uint32(record.versions.length);
        emit VersionPublished(kind, keccak256(bytes(name)), number, name, msg.sender, publication);
    }

    /// @inheritdoc IRegistry
    function transferName(Kind kind, string calldata name, address to) external {
        if (to == address(0)) revert ZeroAddress();
        Record storage record = _records[_key(kind, name)];
        address owner = record.owner;
        if (owner == address(0)) revert UnknownName(name);
        if (owner != msg.sender) revert NotNameOwner(name, msg.sender, owner);
        record.owner = to;
        emit NameTransferred(kind, name, msg.sender, to);
    }

    /// @inheritdoc IRegistry
    function ownerOf(Kind kind, string calldata name) external view returns (address) {
        return _records[_key(kind, name)].owner;
    }

    /// @inheritdoc IRegistry
    function versionCount(Kind kind, string calldata name) external view returns (uint32) {
        return uint32(_records[_key(kind, name)].versions.length);
    }

    /// @inheritdoc IRegistry
    function version(Kind kind, string calldata name, uint32 number) external view returns (Version memory) {
        Version[] storage versions = _records[_key(kind, name)].versions;
        if (number == 0 || number > versions.length) revert UnknownVersion(name, number);
        return versions[number - 1];
    }

    /// @inheritdoc IRegistry
    function latest(Kind kind, string calldata name) external view returns (uint32 number, Version memory) {
        Version[] storage versions = _records[_key(kind, name)].versions;
        if (versions.length == 0) revert UnknownName(name);
        number = uint32(versions.length);
        return (number, versions[number - 1]);
    }

    /// @inheritdoc IRegistry
    function nameCount(Kind kind) external view returns (uint256) {
        return _names[kind].length;
    }

    /// @inheritdoc IRegistry
    function nameAt(Kind kind, uint256 index) external view returns (string memory) {
        string[] storage names = _names[kind];
        if (index >= names.length) revert NameIndexOutOfRange(index, names.length);
        return names[index];
    }

    /// @inheritdoc IRegistry
    function isValidName(string calldata name) external pure returns (bool) {
        return _validName(bytes(name));
    }

    /*//////////////////////////////////////////////////////////////
                                INTERNAL
    //////////////////////////////////////////////////////////////*/

    function _key(Kind kind, string calldata name) private pure returns (bytes32) {
        return keccak256(abi.encode(kind, name));
    }

    /// @dev No parent is an empty name with version 0; a parent is an existing version of the same
    /// kind, so lineage never points forward or at nothing.
    function _checkParent(Kind kind, string calldata parentName, uint32 parentVersion) private view {
        if (parentVersion == 0) {
            if (bytes(parentName).length != 0) revert InvalidParent(parentName, parentVersion);
            return;
        }
        if (parentVersion > _records[_key(kind, parentName)].versions.length) {
            revert UnknownVersion(parentName, parentVersion);
        }
    }

    /// @dev Only the user who paid for a job can say a version came out of it.
    function _checkJob(uint256 jobId) private view {
        if (market.status(jobId) == IJobMarket.JobStatus.None) revert UnknownJob(jobId);
        address user = market.job(jobId).user;
        if (user != msg.sender) revert JobPaidByAnother(jobId, msg.sender, user);
    }

    function _validName(bytes calldata name) private pure returns (bool) {
        uint256 length = name.length;
        if (length < 3 || length > MAX_NAME_LENGTH) return false;
        uint256 slash = type(uint256).max;
        for (uint256 i; i < length; ++i) {
            bytes1 c = name[i];
            if (c == "/") {
                if (slash != type(uint256).max) return false;
                slash = i;
            } else if (!(_isLowerAlnum(c) || c == "-" || c == "_" || c == ".")) {
                return false;
            }
        }
        return slash != type(uint256).max && slash != 0 && slash != length - 1;
    }

    function _validCid(bytes calldata cid, bool optional) private pure returns (bool) {
        uint256 length = cid.length;
        if (length == 0) return optional;
        if (length > MAX_CID_LENGTH) return false;
        for (uint256 i; i < length; ++i) {
            bytes1 c = cid[i];
            if (!(_isLowerAlnum(c) || (c >= "A" && c <= "Z"))) return false;
        }
        return true;
    }

    function _validLicense(bytes calldata license) private pure returns (bool) {
        uint256 length = license.length;
        if (length == 0 || length > MAX_LICENSE_LENGTH) return false;
        for (uint256 i; i < length; ++i) {
            bytes1 c = license[i];
            if (!(_isLowerAlnum(c) || (c >= "A" && c <= "Z") || c == "." || c == "-" || c == "+")) return false;
        }
        return true;
    }

    function _isLowerAlnum(bytes1 c) private pure returns (bool) {
        return (c >= "a" && c <= "z") || (c >= "0" && c <= "9");
    }
}
